"""Adding days, differences and weekdays."""

from .calendar import days_in_month, is_leap

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def ordinal(year, month, day):
    """Days since 0001-01-01 (which is day 1)."""
    y = year - 1
    days = y * 365 + y // 4 - y // 100 + y // 400
    for m in range(1, month):
        days += days_in_month(year, m)
    return days + day


def add_days(year, month, day, n):
    """The date n days later (n may be negative)."""
    day += n
    while day > days_in_month(year, month):
        day -= days_in_month(year, month)
        month += 1
        if month > 12:
            month = 1
            year += 1
    while day < 1:
        month -= 1
        if month < 1:
            month = 12
            year -= 1
        day += days_in_month(year, month)
    return (year, month, day)


def days_between(a, b):
    """Days from date a to date b (negative when b is earlier)."""
    return ordinal(*b) - ordinal(*a)


def weekday(year, month, day):
    """Name of the weekday; 0001-01-01 was a Monday."""
    return WEEKDAYS[(ordinal(year, month, day) - 1) % 7]


def year_length(year):
    return 366 if is_leap(year) else 365
