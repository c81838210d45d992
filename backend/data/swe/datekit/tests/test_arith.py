from datekit import add_days, days_between, weekday


def test_add_days():
    assert add_days(2023, 1, 30, 3) == (2023, 2, 2)


def test_days_between():
    assert days_between((2023, 1, 1), (2023, 3, 1)) == 59


def test_weekday():
    assert weekday(2024, 1, 1) == "Monday"
