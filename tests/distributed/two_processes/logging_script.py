"""Launched on 2 processes by tests/test_logging.py: which ranks emit which records."""

from __future__ import annotations

import logging
import sys

from accel import PartialState
from accel.logging import get_logger

logging.basicConfig(stream=sys.stderr, format="%(message)s", level=logging.INFO)
logger = get_logger(__name__)
rank = PartialState().process_index
logger.info("MSG main-only %d", rank)
logger.info("MSG every %d", rank, main_process_only=False)
logger.info("MSG ordered %d", rank, main_process_only=False, in_order=True)
