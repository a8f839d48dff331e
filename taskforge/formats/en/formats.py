"""Dates and times in the admin, for on-call engineers: ISO-like, to the second, 24-hour (all times are UTC).

Django's English formats drop the seconds ("Dec. 1, 2026, 11:21 p.m."), which
cannot tell apart two moves of the same task.
"""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
