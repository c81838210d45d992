from evotui.components.run_screen import RunScreen


class DiagnosesScreen(RunScreen):
    pass
