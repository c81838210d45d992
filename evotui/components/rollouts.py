from evotui.components.run_screen import RunScreen


class RolloutsScreen(RunScreen):
    pass
