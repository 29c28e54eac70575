"""Keep pydicom from echoing header values into logs.

pydicom's validation warnings quote the offending value ("Invalid value for VR DA: ..."),
and a malformed value may be a name or a date: on executors those warnings would carry
identifiers into Spark's logs. Values are validated by our own rules instead.
"""

import logging
import warnings

import pydicom.config


def quiet_pydicom() -> None:
    pydicom.config.settings.reading_validation_mode = pydicom.config.IGNORE
    warnings.filterwarnings("ignore", module=r"pydicom(\.|$)")
    logging.getLogger("pydicom").setLevel(logging.CRITICAL)
