"""DIMSE, the DICOM network protocol (pynetdicom): C-FIND listing, C-GET or C-MOVE retrieval, one association
per session.

- Listing (`DimseSession.list_day`): C-FIND at study level by StudyDate, then series of each study, then
  instances of each series (UIDs, SOP class, and a few attributes that make the change marker);
- C-GET (`retrieve: c-get`): the instance comes back on our own association (no inbound port). The
  association proposes, for every SOP class the task has met, one presentation context per transfer syntax
  we keep as sent (`STORED_SYNTAXES`), so the PACS can send each instance in the syntax it stored it in
  rather than transcode it;
- C-MOVE (`retrieve: c-move`): the PACS sends the instance to `move_destination`, the AE title of
  `imaging-receive` (imaging/pacs/receive.py), which writes it into the spool under the name the listing
  gives it (`file_name`, a digest of its UIDs) and answers success only once it is on disk; the final C-MOVE
  response therefore means the file is there, and the retrieval takes it from the spool.

Either way the file landed is `part10(...)`: the data set exactly as the PACS sent it, after a file meta that
depends on the instance alone (its SOP class and instance, the transfer syntax, this platform's
implementation UID), so the same instance lands as the same bytes whichever way it came (C-GET, C-MOVE, a
push to imaging-receive).

Failures, for the retry policy (`dimse_failure`): no association, an abort or a time-out are transient
(the server's: retried, then the run fails); an association rejected is refused at once (a wrong AE title
or an unknown peer: `PacsAuthError` naming both AE titles); a failure status of one instance's retrieval is
the instance's own (0xA7xx, out of resources, retried first); a move destination the PACS does not know
(0xA801) fails the run with what to register. Messages name the site, AE titles and statuses, never a UID.
"""

from __future__ import annotations

import io
import logging
import threading

from imaging import fs as fsx
from imaging.pacs.connection import (C_MOVE, Failure, InstanceFailed, PacsServer, RetryPolicy)
from imaging.pacs.records import ListedInstance, StudyRow, dicom_date, file_name

# pynetdicom logs identifiers and responses at INFO and DEBUG: held at WARNING (no UID in a log).
logging.getLogger("pynetdicom").setLevel(logging.WARNING)

# The implementation that wrote a landed file (Part 10 file meta): this platform, whichever PACS sent it.
IMPLEMENTATION_CLASS_UID = "2.25.302446398851240412466327427185306475153"
IMPLEMENTATION_VERSION_NAME = "EYEPACS_1"

NO_INSTANCE = "the server sent no instance"
NOT_IN_SPOOL = "the move destination did not store the instance"
NO_SOP_CLASS = "no SOP class in the PACS listing"
SUCCESS, PENDING = 0x0000, (0xFF00, 0xFF01)
MOVE_DESTINATION_UNKNOWN = 0xA801

# Keys of an instance-level C-FIND: its UIDs and class, and attributes that change when the PACS corrects an
# instance (its number, dimensions): the change marker is a digest of what comes back for them.
INSTANCE_KEYS = ("SOPInstanceUID", "SOPClassUID", "InstanceNumber", "Rows", "Columns", "NumberOfFrames",
                 "BitsAllocated")


def _stored_syntaxes() -> tuple[str, ...]:
    from pydicom import uid

    return (uid.ExplicitVRLittleEndian, uid.ImplicitVRLittleEndian, uid.DeflatedExplicitVRLittleEndian,
            uid.ExplicitVRBigEndian, uid.JPEGBaseline8Bit, uid.JPEGExtended12Bit, uid.JPEGLossless,
            uid.JPEGLosslessSV1, uid.JPEGLSLossless, uid.JPEGLSNearLossless, uid.JPEG2000Lossless, uid.JPEG2000,
            uid.RLELossless, uid.HTJ2KLossless, uid.HTJ2KLosslessRPCL, uid.HTJ2K)


STORED_SYNTAXES = _stored_syntaxes()
MAX_CONTEXTS = 126  # PS3.8: at most 128 presentation contexts (odd ids 1..255); two are C-FIND's and C-GET's


class DimseRejected(Exception):
    """The PACS rejected the association (A-ASSOCIATE-RJ): its reason, as pynetdicom gives it."""


class DimseNoConnection(Exception):
    """No association: refused, reset, aborted or timed out."""


class DimseStatus(Exception):
    def __init__(self, status: int):
        super().__init__(f"DIMSE status 0x{status:04X}")
        self.status = status


def dimse_failure(site: str, error: BaseException, server: PacsServer | None = None) -> Failure | None:
    address = server.dimse if server is not None else None
    if isinstance(error, DimseRejected):
        aes = (f" (called AE {address.called_ae}, calling AE {address.calling_ae})" if address else "")
        return Failure("association rejected", transient=False, refused=True, message=(
            f"PACS of site {site} rejected the association{aes}: {error}. Check called_ae and calling_ae in "
            f"platform/pacs.yaml, and that the PACS lists our AE title, host and port"))
    if isinstance(error, (DimseNoConnection, ConnectionError, TimeoutError, OSError)):
        return Failure("no association", transient=True)
    if isinstance(error, DimseStatus):
        if error.status == MOVE_DESTINATION_UNKNOWN:
            destination = address.move_destination if address else "the move destination"
            return Failure(str(error), transient=False, refused=True, message=(
                f"PACS of site {site} does not know the move destination {destination} (DIMSE status 0xA801): "
                f"register imaging-receive's AE title, host and port with the PACS"))
        transient = 0xA700 <= error.status <= 0xA7FF  # out of resources: the server may recover
        return Failure(str(error), transient=transient, instance=True)
    return None


def part10(dataset: bytes, sop_class: str, sop: str, transfer_syntax: str) -> bytes:
    """A Part 10 file of a data set received over the network: preamble, a file meta that depends on the
    instance alone, and the data set's bytes as sent."""
    from pydicom.dataset import FileMetaDataset
    from pydicom.filewriter import write_file_meta_info

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = sop
    meta.TransferSyntaxUID = transfer_syntax
    meta.ImplementationClassUID = IMPLEMENTATION_CLASS_UID
    meta.ImplementationVersionName = IMPLEMENTATION_VERSION_NAME
    buffer = io.BytesIO()
    buffer.write(b"\0" * 128 + b"DICM")
    from pydicom.filebase import DicomFileLike

    write_file_meta_info(DicomFileLike(buffer), meta, enforce_standard=True)
    return buffer.getvalue() + dataset


def _value(ds, keyword: str) -> str | None:
    value = ds.get(keyword) if ds is not None else None
    if value is None or value == "":
        return None
    return str(value).rstrip("\0 ")


class DimseSession:
    """One server's association, opened when first needed and again after it is lost; every request goes
    through the retry policy."""

    def __init__(self, server: PacsServer, policy: RetryPolicy):
        if server.dimse is None:
            raise ValueError(f"site {server.site} has no DICOM address")
        self.server, self.policy, self.address = server, policy, server.dimse
        self.assoc = None
        self.classes: tuple[str, ...] = ()  # SOP classes the open association takes C-GET sub-operations of
        self.received: dict[str, tuple[bytes, str, str]] = {}  # SOP instance -> data set, class, syntax
        self.lock = threading.Lock()

    # --- association ----------------------------------------------------------------------------------------

    def _classify(self, site: str, error: BaseException) -> Failure | None:
        if not isinstance(error, (DimseRejected, DimseStatus, InstanceFailed)):
            self._drop()  # a lost association is opened afresh by the next attempt
        return dimse_failure(site, error, self.server)

    def _call(self, request, per_instance: bool = False):
        return self.policy.call(self.server.site, request, per_instance=per_instance, classify=self._classify)

    def _associate(self, classes: tuple[str, ...] = ()):
        from pynetdicom import AE, build_role, evt
        from pynetdicom.sop_class import (StudyRootQueryRetrieveInformationModelFind as FIND,
                                          StudyRootQueryRetrieveInformationModelGet as GET,
                                          StudyRootQueryRetrieveInformationModelMove as MOVE)

        ae = AE(ae_title=self.address.calling_ae)
        timeout = self.policy.timeout_seconds
        ae.acse_timeout = ae.dimse_timeout = ae.network_timeout = ae.connection_timeout = timeout
        ae.maximum_pdu_size = 0  # no limit on what we receive: the sender's own PDU size decides
        ae.add_requested_context(FIND)
        ae.add_requested_context(MOVE if self.address.retrieve == C_MOVE else GET)
        roles = []
        for sop_class in classes:
            for syntax in STORED_SYNTAXES:
                ae.add_requested_context(sop_class, [syntax])
            roles.append(build_role(sop_class, scp_role=True))
        handlers = [(evt.EVT_C_STORE, self._on_store)] if classes else []
        tls = self.address.tls
        assoc = ae.associate(self.address.host, self.address.port, ae_title=self.address.called_ae,
                             ext_neg=roles or None, evt_handlers=handlers,
                             tls_args=(tls.client_context(), self.address.host) if tls else None)
        if assoc.is_established:
            no_delay(assoc.dul.socket.socket)
            return assoc
        if assoc.is_rejected:
            raise DimseRejected(_rejection(assoc))
        raise DimseNoConnection()

    def _open(self, classes: tuple[str, ...] = ()):
        """The association (C-FIND and the site's retrieval), (re)opened to take C-GET sub-operations of
        `classes` too."""
        if self.assoc is not None and self.assoc.is_established and set(classes) <= set(self.classes):
            return self.assoc
        self._drop()
        self.assoc = self._associate(classes)
        self.classes = classes
        return self.assoc

    def _drop(self) -> None:
        if self.assoc is not None:
            try:
                self.assoc.release() if self.assoc.is_established else self.assoc.abort()
            except Exception:  # noqa: BLE001 - a dead association has nothing to release
                pass
        self.assoc, self.classes = None, ()

    def close(self) -> None:
        self._drop()

    # --- C-FIND ---------------------------------------------------------------------------------------------

    def _find(self, level: str, **keys) -> list:
        from pydicom.dataset import Dataset
        from pynetdicom.sop_class import StudyRootQueryRetrieveInformationModelFind as FIND

        identifier = Dataset()
        identifier.QueryRetrieveLevel = level
        for keyword, value in keys.items():
            setattr(identifier, keyword, value if value != "" else None)  # None: an empty return key

        def request():
            assoc = self._open(self.classes)
            found = []
            for status, ds in assoc.send_c_find(identifier, FIND):
                if status is None or "Status" not in status:
                    raise DimseNoConnection()
                if status.Status in PENDING:
                    found.append(ds)
                elif status.Status != SUCCESS:
                    raise DimseStatus(status.Status)
            return found

        return self._call(request)[0]

    def list_day(self, date: str) -> list[ListedInstance]:
        """Every instance of the studies dated `date`: C-FIND studies by StudyDate, then their series, then
        each series' instances."""
        import hashlib

        listed = []
        for study in self._find("STUDY", StudyDate=dicom_date(date), StudyInstanceUID=""):
            study_uid = _value(study, "StudyInstanceUID")
            if study_uid is None:
                continue
            for series in self._find("SERIES", StudyInstanceUID=study_uid, SeriesInstanceUID=""):
                series_uid = _value(series, "SeriesInstanceUID")
                if series_uid is None:
                    continue
                for instance in self._find("IMAGE", StudyInstanceUID=study_uid, SeriesInstanceUID=series_uid,
                                           **{k: "" for k in INSTANCE_KEYS}):
                    sop = _value(instance, "SOPInstanceUID") or ""
                    said = {k: _value(instance, k) for k in INSTANCE_KEYS}
                    marker = hashlib.sha256(repr(sorted(said.items())).encode()).hexdigest()[:32]
                    listed.append(ListedInstance(study_uid, series_uid, sop, marker, _pixel_bytes(said),
                                                 said["SOPClassUID"]))
        return listed

    def list_studies(self, first: str, last: str) -> list[StudyRow]:
        """One C-FIND of the studies dated `first`..`last` (study level, no instance fan-out)."""
        found = self._find("STUDY", StudyDate=f"{dicom_date(first)}-{dicom_date(last)}", StudyInstanceUID="",
                           NumberOfStudyRelatedSeries="", NumberOfStudyRelatedInstances="")
        return [StudyRow(_value(s, "StudyInstanceUID"), _value(s, "StudyDate"), _value(s, "NumberOfStudyRelatedSeries"),
                         _value(s, "NumberOfStudyRelatedInstances")) for s in found]

    # --- C-GET and C-MOVE -----------------------------------------------------------------------------------

    def _on_store(self, event) -> int:
        """A C-GET sub-operation: the data set as sent, kept in memory for the request that asked for it."""
        request = event.request
        data = event.encoded_dataset(include_meta=False)
        with self.lock:
            self.received[str(request.AffectedSOPInstanceUID)] = (
                data, str(request.AffectedSOPClassUID), str(event.context.transfer_syntax))
        return SUCCESS

    def _retrieve_request(self, model: str, study: str, series: str, sop: str, classes: tuple[str, ...], send):
        from pydicom.dataset import Dataset

        identifier = Dataset()
        identifier.QueryRetrieveLevel = "IMAGE"
        identifier.StudyInstanceUID, identifier.SeriesInstanceUID, identifier.SOPInstanceUID = study, series, sop
        assoc = self._open(classes)
        final = None
        for status, _ in send(assoc, identifier):
            if status is None or "Status" not in status:
                raise DimseNoConnection()
            if status.Status not in PENDING:
                final = status
        if final is None:
            raise DimseNoConnection()
        failed = int(final.get("NumberOfFailedSuboperations", 0) or 0)
        if final.Status not in (SUCCESS, 0xB000) or failed:
            raise DimseStatus(final.Status if final.Status != SUCCESS else 0xB000)

    def retrieve(self, study: str, series: str, sop: str, sop_class: str | None) -> tuple[bytes, int]:
        """The instance as a Part 10 file (`part10`) and the attempts it took."""
        if self.address.retrieve == C_MOVE:
            return self._call(lambda: self._move(study, series, sop), per_instance=True)
        if not sop_class:
            raise InstanceFailed(NO_SOP_CLASS)
        return self._call(lambda: self._get(study, series, sop, sop_class), per_instance=True)

    def _get(self, study: str, series: str, sop: str, sop_class: str) -> bytes:
        from pynetdicom.sop_class import StudyRootQueryRetrieveInformationModelGet as GET

        classes = self.classes if sop_class in self.classes else (*self.classes, sop_class)
        if len(classes) * len(STORED_SYNTAXES) > MAX_CONTEXTS:
            classes = (sop_class,)
        with self.lock:
            self.received.pop(sop, None)
        self._retrieve_request(GET, study, series, sop, classes, lambda assoc, ds: assoc.send_c_get(ds, GET))
        with self.lock:
            got = self.received.pop(sop, None)
            self.received.clear()  # anything else the server sent was not asked for
        if got is None:
            raise InstanceFailed(NO_INSTANCE)
        data, received_class, syntax = got
        return part10(data, received_class, sop, syntax)

    def _move(self, study: str, series: str, sop: str) -> bytes:
        from pynetdicom.sop_class import StudyRootQueryRetrieveInformationModelMove as MOVE

        spool = fsx.under(self.address.spool, file_name(study, series, sop))
        self._retrieve_request(MOVE, study, series, sop, (),
                               lambda assoc, ds: assoc.send_c_move(ds, self.address.move_destination, MOVE))
        try:
            data = fsx.read_bytes(spool)
        except FileNotFoundError:
            raise InstanceFailed(NOT_IN_SPOOL) from None
        fsx.remove(spool)  # identifiable bytes do not linger in the spool: this run's staging holds them now
        return data


def no_delay(sock) -> None:
    """TCP_NODELAY on an association's socket. pynetdicom leaves Nagle's algorithm on, and a DIMSE message
    goes out as several small PDUs (command, then data set): each request then waited for the peer's delayed
    ACK, about 90 ms a C-FIND or C-GET round trip on loopback (measured; dcmtk sets it too)."""
    import socket

    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):  # not a TCP socket: nothing to tune
        pass


def _pixel_bytes(said: dict) -> int | None:
    try:
        rows, columns = int(said["Rows"]), int(said["Columns"])
        bits = int(said.get("BitsAllocated") or 8)
        frames = int(said.get("NumberOfFrames") or 1)
    except (TypeError, ValueError):
        return None
    return rows * columns * frames * bits // 8


def _rejection(assoc) -> str:
    """Why the association was rejected, in words (PS3.8 9.3.4: result, source and reason codes)."""
    primitive = getattr(assoc.acceptor, "primitive", None) or getattr(assoc, "_rejection", None)
    reason = getattr(primitive, "reason_str", None) if primitive is not None else None
    if reason:
        return str(reason)
    return "rejected by the PACS"
