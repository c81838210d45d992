from evotui.components.run_screen import RunScreen


class InterventionsScreen(RunScreen):
    pass
