"""File meta information, regenerated: nothing from the source's group 0002 survives unchecked."""

from __future__ import annotations

from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import UID, ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian

from .errors import NotDeidentifiable
from .version import IMPLEMENTATION_CLASS_UID, IMPLEMENTATION_VERSION_NAME

_BY_ENCODING = {
    (True, True): ImplicitVRLittleEndian,
    (False, True): ExplicitVRLittleEndian,
    (False, False): ExplicitVRBigEndian,
}


def transfer_syntax(ds: Dataset) -> UID:
    """The source's transfer syntax (kept: pixels are copied, never re-encoded).

    Files without one get the syntax they were actually read with. A private or unknown
    syntax cannot be written reliably, so the file is quarantined.
    """
    meta = getattr(ds, "file_meta", None)
    value = str(meta.get("TransferSyntaxUID", "") or "") if meta is not None else ""
    value = value.strip().rstrip("\x00")
    if not value:
        encoding = tuple(ds.original_encoding)
        if encoding not in _BY_ENCODING:
            raise NotDeidentifiable("unknown transfer syntax")
        return _BY_ENCODING[encoding]
    uid = UID(value)
    if uid.is_private or not uid.is_transfer_syntax:
        raise NotDeidentifiable("unsupported transfer syntax")
    return uid


def build(ds: Dataset, syntax: UID) -> FileMetaDataset:
    """Group 0002 for the de-identified `ds`. SourceApplicationEntityTitle and the rest are dropped."""
    meta = FileMetaDataset()
    meta.FileMetaInformationVersion = b"\x00\x01"
    meta.MediaStorageSOPClassUID = ds.SOPClassUID  # kept as is: it is the dataset's own class
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID  # already replaced by the walk
    meta.TransferSyntaxUID = syntax
    meta.ImplementationClassUID = IMPLEMENTATION_CLASS_UID
    meta.ImplementationVersionName = IMPLEMENTATION_VERSION_NAME
    return meta
