"""The TUI's widgets and screens, one per module."""
