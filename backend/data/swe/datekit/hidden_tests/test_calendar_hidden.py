from datekit import day_of_year, days_in_month, is_leap


def test_leap_rules():
    assert is_leap(2000)
    assert not is_leap(1900)
    assert is_leap(1996)
    assert not is_leap(2001)


def test_month_lengths():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31
    assert days_in_month(2000, 2) == 29
    assert days_in_month(1900, 2) == 28
    for bad in (0, 13):
        try:
            days_in_month(2023, bad)
        except ValueError:
            continue
        raise AssertionError(f"month {bad} should raise ValueError")


def test_day_of_year_cases():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 12, 31) == 365
    assert day_of_year(2024, 12, 31) == 366
    assert day_of_year(2024, 3, 1) == 61
