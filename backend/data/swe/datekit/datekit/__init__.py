"""Gregorian calendar arithmetic on (year, month, day) tuples."""

from .arith import add_days, days_between, weekday
from .calendar import day_of_year, days_in_month, is_leap

__all__ = ["is_leap", "days_in_month", "day_of_year", "add_days", "days_between", "weekday"]
