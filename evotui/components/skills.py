from evotui.components.run_screen import RunScreen


class SkillsScreen(RunScreen):
    pass
