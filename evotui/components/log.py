from evotui.components.run_screen import RunScreen


class LogScreen(RunScreen):
    pass
