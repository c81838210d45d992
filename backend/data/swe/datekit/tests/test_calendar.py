from datekit import day_of_year, days_in_month, is_leap


def test_is_leap():
    assert is_leap(2024)
    assert not is_leap(2023)


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29


def test_day_of_year():
    assert day_of_year(2023, 3, 1) == 60
