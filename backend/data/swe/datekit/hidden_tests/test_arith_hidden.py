from datekit import add_days, days_between, weekday
from datekit.arith import ordinal, year_length


def test_add_days_cases():
    assert add_days(2023, 1, 30, 3) == (2023, 2, 2)
    assert add_days(2023, 12, 31, 1) == (2024, 1, 1)
    assert add_days(2024, 2, 28, 1) == (2024, 2, 29)
    assert add_days(2023, 2, 28, 1) == (2023, 3, 1)
    assert add_days(2024, 1, 1, -1) == (2023, 12, 31)
    assert add_days(2023, 3, 1, -1) == (2023, 2, 28)
    assert add_days(2023, 5, 5, 0) == (2023, 5, 5)
    assert add_days(2023, 1, 1, 365) == (2024, 1, 1)


def test_ordinal_and_between():
    assert ordinal(1, 1, 1) == 1
    assert ordinal(2, 1, 1) == 366
    assert days_between((2023, 1, 1), (2023, 3, 1)) == 59
    assert days_between((2024, 1, 1), (2024, 3, 1)) == 60
    assert days_between((2023, 3, 1), (2023, 1, 1)) == -59
    assert days_between((1999, 12, 31), (2000, 1, 1)) == 1
    assert days_between((1900, 1, 1), (2000, 1, 1)) == 36524


def test_weekdays():
    assert weekday(2024, 1, 1) == "Monday"
    assert weekday(2000, 1, 1) == "Saturday"
    assert weekday(2023, 12, 25) == "Monday"
    assert weekday(1, 1, 1) == "Monday"
    assert weekday(2024, 2, 29) == "Thursday"


def test_year_length():
    assert year_length(2024) == 366
    assert year_length(2023) == 365
