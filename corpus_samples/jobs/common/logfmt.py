"""Log line formats seen on real clusters: plain logging, glog-like C++ style, loguru-like."""

from __future__ import annotations

import logging
import os
import sys
import time


class GlogFormatter(logging.Formatter):
    """``I1202 10:01:02.123456 4242 train.py:88] message``, like glog and torch's own C++ logs."""

    def format(self, record: logging.LogRecord) -> str:
        lt = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        head = (
            f"{record.levelname[0]}{lt.tm_mon:02d}{lt.tm_mday:02d} "
            f"{time.strftime('%H:%M:%S', lt)}.{micros:06d} {record.process} "
            f"{record.filename}:{record.lineno}]"
        )
        return f"{head} {record.getMessage()}"


FORMATS = {
    "plain": "%(asctime)s %(levelname)s %(name)s: %(message)s",
    "rank": "%(asctime)s [rank{rank}] %(levelname)-7s %(message)s",
    "loguru": (
        "%(asctime)s.%(msecs)03d | %(levelname)-8s | %(module)s:%(funcName)s:%(lineno)d"
        " - %(message)s"
    ),
}


def get_logger(name: str, style: str = "plain", level: int = logging.INFO) -> logging.Logger:
    rank = os.environ.get("RANK", "0")
    handler = logging.StreamHandler(sys.stdout)
    if style == "glog":
        handler.setFormatter(GlogFormatter())
    else:
        datefmt = "%Y-%m-%d %H:%M:%S"
        handler.setFormatter(logging.Formatter(FORMATS[style].format(rank=rank), datefmt=datefmt))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return logger
