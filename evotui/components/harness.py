from evotui.components.run_screen import RunScreen


class HarnessScreen(RunScreen):
    pass
