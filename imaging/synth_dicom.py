"""DICOM side of the synthetic eye hospital: headers, pixels and deliberately broken files.

`imaging.synth` decides *who* is imaged *when*; this module turns one planned image
(an `ImageSpec`) into a Part 10 file that is as valid as practical against the
Ophthalmic Tomography (OPT) and Ophthalmic Photography 8 Bit (OP) IODs, while carrying
the identifying values real exports carry (names, ids, addresses, staff, private tags).
Everything is derived from the inputs: no clock, no uuid4, no global random state.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian

OPT_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.5.4"  # Ophthalmic Tomography Image Storage
OP_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.5.1"  # Ophthalmic Photography 8 Bit Image Storage
SOP_CLASS = {"OPT": OPT_SOP_CLASS, "OP": OP_SOP_CLASS}
PRIVATE_CREATOR = {"OPT": "SYNTH OCT VENDOR 1.0", "OP": "SYNTH FUNDUS VENDOR 1.0"}
PRIVATE_GROUP = 0x0009


def derive_uid(seed: int, *parts: object) -> str:
    """A `2.25.` UID derived from the seed and a label, so reruns reproduce every UID."""
    text = "\x1f".join(["synth", str(seed), *map(str, parts)])
    return "2.25." + str(int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big"))


def derive_int(seed: int, *parts: object) -> int:
    """A 64-bit integer derived like `derive_uid`, for seeding per-image pixel noise."""
    text = "\x1f".join(["synth-int", str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


# Sites by index: (institution, org code, town, postcode area, street address).
SITE_PROFILES = [("Synthtown Eye Hospital", "SEH", "Synthtown", "ST", "1 Lantern Row"),
                 ("Northbridge Ophthalmic Centre", "NOC", "Northbridge", "NB", "22 Weir Street"),
                 ("Easthaven Eye Clinic", "EEC", "Easthaven", "EH", "5 Quayside"),
                 ("Westmoor Retina Unit", "WRU", "Westmoor", "WM", "90 Fell Road")]
STAFF = ["Featherby^Oswin^^Dr", "Kingsmill^Edmund", "Pilbeam^Tamsin", "Ravensworth^Clemency^^Dr",
         "Abernethy^Lucius", "Gosforth^Petronella", "Mortlake^Ignatius^^Dr", "Tregarthen^Saffron",
         "Wolstenholme^Bede"]


def site_profile(index: int) -> tuple[str, str, str, str, str]:
    if index < len(SITE_PROFILES):
        return SITE_PROFILES[index]
    return (f"Synthetic Eye Unit {index + 1}", f"SU{index + 1}", f"Synthford {index + 1}", "SF",
            f"{index + 1} Market Street")


@dataclass(frozen=True)
class PatientHeader:
    name: str  # DICOM PN, e.g. "ASHDOWN^AURELIA"
    patient_id: str
    issuer: str
    birth_date: str  # YYYYMMDD
    sex: str
    address: str
    other_id: str  # the site's local hospital number
    other_issuer: str


@dataclass(frozen=True)
class SiteHeader:
    institution: str
    address: str
    station: str
    serial: str
    referring: str
    performing: str
    operator: str

    @classmethod
    def for_site(cls, seed: int, index: int) -> "SiteHeader":
        name, code, town, area, street = site_profile(index)
        staff = [STAFF[(3 * index + k) % len(STAFF)].upper() for k in range(3)]
        return cls(name, f"{street}, {town}, {area}1 1AA", f"{code}-OCT-{index + 1:02d}",
                   f"SN{derive_int(seed, 'serial', index) % 10**8:08d}", *staff)


@dataclass(frozen=True)
class StudyHeader:
    uid: str
    date: str  # YYYYMMDD
    time: str  # HHMMSS
    accession: str
    study_id: str
    description: str
    requested_procedure_id: str
    scheduled_step_id: str


@dataclass(frozen=True)
class ImageSpec:
    modality: str  # "OPT" or "OP"
    laterality: str  # "R" or "L"
    patient: PatientHeader
    site: SiteHeader
    study: StudyHeader
    series_uid: str
    series_number: int
    series_description: str
    sop_instance_uid: str
    frame_of_reference_uid: str
    dimension_uid: str
    acquisition_time: str  # HHMMSS
    shape: tuple[int, ...]  # OPT (frames, rows, cols); OP (rows, cols)
    pixel_seed: int
    scan_quality: float
    reference: tuple[str, str] | None = None  # (SOP class, SOP instance) of the baseline


# ----------------------------------------------------------------------------- helpers


def _set(ds: Dataset, **attrs) -> Dataset:
    for keyword, value in attrs.items():
        setattr(ds, keyword, value)
    return ds


def _item(**attrs) -> Dataset:
    return _set(Dataset(), **attrs)


def _code(value: str, scheme: str, meaning: str) -> Dataset:
    return _item(CodeValue=value, CodingSchemeDesignator=scheme, CodeMeaning=meaning)


def _undefined_length(ds: Dataset, keyword: str) -> None:
    """Encode a sequence with undefined length, as many vendors do (and readers must handle)."""
    ds[keyword].is_undefined_length = True
    for item in ds[keyword].value:
        item.is_undefined_length_sequence_item = True


def _age(birth: str, on: str) -> str:
    """DICOM AS age on a date (both YYYYMMDD)."""
    years = int(on[:4]) - int(birth[:4]) - (on[4:] < birth[4:])
    return f"{years:03d}Y"


# ----------------------------------------------------------------------------- modules


def _patient_study_series(ds: Dataset, spec: ImageSpec) -> None:
    """Patient, General Study, Patient Study, General Series and General Equipment modules."""
    p, s, st = spec.patient, spec.site, spec.study
    ds.PatientName = p.name
    ds.PatientID = p.patient_id
    ds.IssuerOfPatientID = p.issuer
    ds.PatientBirthDate = p.birth_date
    ds.PatientSex = p.sex
    ds.PatientAddress = p.address
    ds.OtherPatientIDsSequence = [
        _item(PatientID=p.other_id, IssuerOfPatientID=p.other_issuer, TypeOfPatientID="TEXT")
    ]
    # Undefined length here also makes the truncated junk file fail loudly (see truncated_bytes).
    _undefined_length(ds, "OtherPatientIDsSequence")
    ds.PatientAge = _age(p.birth_date, st.date)

    ds.StudyInstanceUID = st.uid
    ds.StudyDate, ds.StudyTime = st.date, st.time
    ds.ReferringPhysicianName = s.referring
    ds.StudyID = st.study_id
    ds.AccessionNumber = st.accession
    ds.StudyDescription = st.description

    ds.Modality = spec.modality
    ds.SeriesInstanceUID = spec.series_uid
    ds.SeriesNumber = spec.series_number
    ds.SeriesDate, ds.SeriesTime = st.date, st.time
    ds.SeriesDescription = spec.series_description
    ds.PerformingPhysicianName = s.performing
    ds.OperatorsName = s.operator
    ds.RequestAttributesSequence = [
        _item(
            RequestedProcedureID=st.requested_procedure_id,
            ScheduledProcedureStepID=st.scheduled_step_id,
            AccessionNumber=st.accession,
        )
    ]

    ds.Manufacturer = "Synthetic Ophthalmics Ltd"
    ds.ManufacturerModelName = "SynthOCT 3000" if spec.modality == "OPT" else "SynthFundus 200"
    ds.DeviceSerialNumber = s.serial
    ds.SoftwareVersions = "4.2.1"
    ds.InstitutionName = s.institution
    ds.InstitutionAddress = s.address
    ds.StationName = s.station


def _image_common(ds: Dataset, spec: ImageSpec) -> None:
    """Attributes shared by both IODs: SOP Common, acquisition, ocular region, pixel basics."""
    day, time = spec.study.date, spec.acquisition_time
    _set(ds, SpecificCharacterSet="ISO_IR 100", SOPClassUID=SOP_CLASS[spec.modality],
         SOPInstanceUID=spec.sop_instance_uid, InstanceCreationDate=day, InstanceCreationTime=time,
         InstanceNumber=1, ContentDate=day, ContentTime=time, AcquisitionDateTime=day + time,
         ImageType=["ORIGINAL", "PRIMARY"], AcquisitionContextSequence=[],
         ImageLaterality=spec.laterality, AnatomicRegionSequence=[_code("81745001", "SCT", "Eye")],
         PixelRepresentation=0, BitsAllocated=8, BitsStored=8, HighBit=7,
         LossyImageCompression="00", BurnedInAnnotation="NO", DetectorType="CCD",
         HorizontalFieldOfView=30.0 if spec.modality == "OP" else 20.0,
         EmmetropicMagnification=1.0, IntraOcularPressure=15.0, RefractiveStateSequence=[],
         PupilDilated="NO")  # "YES" would also need mydriatic agent codes


def _reference(spec: ImageSpec) -> list[Dataset]:
    cls, uid = spec.reference
    return [_item(ReferencedSOPClassUID=cls, ReferencedSOPInstanceUID=uid)]


def _private_block(ds: Dataset, spec: ImageSpec) -> None:
    """Vendor tags as real exports have them: a name copy, a quality score, a nested id."""
    creator = PRIVATE_CREATOR[spec.modality]
    block = ds.private_block(PRIVATE_GROUP, creator, create=True)
    block.add_new(0x01, "LO", spec.patient.name)
    block.add_new(0x02, "DS", f"{spec.scan_quality:.1f}")
    nested = Dataset()
    nested.private_block(PRIVATE_GROUP, creator, create=True).add_new(0x01, "LO", spec.patient.patient_id)
    block.add_new(0x03, "SQ", Sequence([nested]))


def build_opt(spec: ImageSpec) -> Dataset:
    """An Ophthalmic Tomography multi-frame volume: one frame per B-scan."""
    frames, rows, cols = spec.shape
    ds = Dataset()
    _patient_study_series(ds, spec)
    _image_common(ds, spec)
    _set(ds, FrameOfReferenceUID=spec.frame_of_reference_uid, PositionReferenceIndicator="",
         AcquisitionNumber=1, AcquisitionDuration=1.5, SamplesPerPixel=1,
         PhotometricInterpretation="MONOCHROME2", PresentationLUTShape="IDENTITY",
         Rows=rows, Columns=cols, NumberOfFrames=frames, AxialLengthOfTheEye=23.5,
         # The OPT Image module fixes these to 0/1/1; dciodvfy then flags them against the
         # Multi-frame Functional Groups module (no Concatenation UID): a known conflict.
         ConcatenationFrameOffsetNumber=0, InConcatenationNumber=1, InConcatenationTotalNumber=1)
    # Ophthalmic Tomography Parameters (the OCT-scanner device code makes the rest required).
    _set(ds, AcquisitionDeviceTypeCodeSequence=[_code("392012008", "SCT", "Optical Coherence Tomography Scanner")],
         LightPathFilterTypeStackCodeSequence=[], IlluminationWaveLength=840.0, IlluminationPower=0.7,
         IlluminationBandwidth=50.0, DepthSpatialResolution=7.0, MaximumDepthDistortion=1.0,
         AlongScanSpatialResolution=14.0, MaximumAlongScanDistortion=1.0,
         AcrossScanSpatialResolution=14.0, MaximumAcrossScanDistortion=1.0)
    _functional_groups(ds, spec)
    _private_block(ds, spec)
    ds.add_new(0x7FE00010, "OB", _even(oct_volume(spec.shape, spec.pixel_seed).tobytes()))
    return ds


def _functional_groups(ds: Dataset, spec: ImageSpec) -> None:
    """Shared/per-frame functional groups and the dimension index (stack id, position)."""
    frames, rows, cols = spec.shape
    width_mm, depth_mm, height_mm = 6.0, 2.0, 6.0  # a 6 x 6 mm macular cube, 2 mm deep
    shared = _item(
        PixelMeasuresSequence=[
            _item(PixelSpacing=[round(depth_mm / rows, 6), round(width_mm / cols, 6)],
                  SliceThickness=round(height_mm / frames, 6))
        ],
        PlaneOrientationSequence=[_item(ImageOrientationPatient=[1, 0, 0, 0, 0, 1])],
        FrameAnatomySequence=[
            _item(AnatomicRegionSequence=[_code("81745001", "SCT", "Eye")], FrameLaterality=spec.laterality)
        ],
    )
    if spec.reference:  # the IOD's place for it; build_dataset also puts a copy at top level
        shared.ReferencedImageSequence = _reference(spec)
        shared.ReferencedImageSequence[0].PurposeOfReferenceCodeSequence = [
            _code("121311", "DCM", "Localizer")
        ]
    ds.SharedFunctionalGroupsSequence = [shared]
    when = spec.study.date + spec.acquisition_time
    ds.PerFrameFunctionalGroupsSequence = [
        _item(
            FrameContentSequence=[
                _item(StackID="1", InStackPositionNumber=i + 1, DimensionIndexValues=[1, i + 1],
                      FrameAcquisitionDateTime=when, FrameReferenceDateTime=when,
                      FrameAcquisitionDuration=30.0)
            ],
            PlanePositionSequence=[
                _item(ImagePositionPatient=[-width_mm / 2, round(-height_mm / 2 + i * height_mm / frames, 6), 0])
            ],
        )
        for i in range(frames)
    ]
    ds.DimensionOrganizationSequence = [_item(DimensionOrganizationUID=spec.dimension_uid)]
    ds.DimensionIndexSequence = [
        _item(DimensionOrganizationUID=spec.dimension_uid, DimensionIndexPointer=pointer,
              FunctionalGroupPointer=0x00209111, DimensionDescriptionLabel=label)
        for pointer, label in ((0x00209056, "Stack ID"), (0x00209057, "In-Stack Position Number"))
    ]


def build_op(spec: ImageSpec) -> Dataset:
    """An 8-bit RGB colour fundus photograph."""
    rows, cols = spec.shape
    ds = Dataset()
    _patient_study_series(ds, spec)
    _image_common(ds, spec)
    _set(ds, SamplesPerPixel=3, PhotometricInterpretation="RGB", PlanarConfiguration=0,
         Rows=rows, Columns=cols, NumberOfFrames=1, PatientOrientation="",
         # Multi-frame module needs a pointer even for one frame; Synchronization is mandatory.
         FrameIncrementPointer=0x00181063, FrameTime=0.0,
         SynchronizationFrameOfReferenceUID=spec.frame_of_reference_uid,
         SynchronizationTrigger="NO TRIGGER", AcquisitionTimeSynchronized="N",
         PatientEyeMovementCommanded="NO",
         AcquisitionDeviceTypeCodeSequence=[_code("409898007", "SCT", "Fundus Camera")],
         IlluminationTypeCodeSequence=[], LightPathFilterTypeStackCodeSequence=[],
         ImagePathFilterTypeStackCodeSequence=[], LensesCodeSequence=[])
    _private_block(ds, spec)
    ds.add_new(0x7FE00010, "OB", _even(fundus_photo(spec.shape, spec.laterality, spec.pixel_seed).tobytes()))
    return ds


def build_dataset(spec: ImageSpec) -> Dataset:
    """The OPT or OP dataset for a spec. A follow-up carries ReferencedImageSequence at top
    level in both modalities (one place for consumers to look; only a dciodvfy warning
    for OPT), and OPT also in its shared functional groups, where the IOD puts it."""
    ds = build_opt(spec) if spec.modality == "OPT" else build_op(spec)
    if spec.reference:
        ds.ReferencedImageSequence = _reference(spec)
    return ds


def encode_part10(ds: Dataset) -> bytes:
    """Part 10 bytes (preamble, DICM, file meta, Explicit VR Little Endian dataset)."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ds.SOPClassUID
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.file_meta = meta
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue()


def _even(data: bytes) -> bytes:
    return data + b"\x00" if len(data) % 2 else data


# ----------------------------------------------------------------------------- pixels


def oct_volume(shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """A retina-like OCT cube (frames, depth, width): bright RNFL and RPE bands, a foveal
    pit in the middle B-scans, fading choroid and speckle. One frame at a time keeps big
    benchmark volumes (49 x 496 x 512) cheap on memory."""
    frames, rows, cols = shape
    rng = np.random.default_rng(seed)
    x = np.linspace(-1.0, 1.0, cols, dtype=np.float32)[None, :]
    depth = np.linspace(0.0, 1.0, rows, dtype=np.float32)[:, None]
    out = np.empty(shape, dtype=np.uint8)
    for f in range(frames):
        z = -1.0 + 2.0 * f / max(frames - 1, 1)
        pit = 0.07 * np.exp(-(x**2 + z**2) / 0.04)
        top = 0.32 - 0.06 * x**2 + pit  # inner limiting membrane, dipping at the fovea
        rpe = 0.62 - 0.06 * x**2  # retinal pigment epithelium; both curve up at the edges
        below = depth - top
        img = np.full((rows, cols), 12.0, dtype=np.float32)
        img = np.where((below >= 0) & (depth < rpe), 70.0 + 40.0 * np.cos(below * 60.0), img)
        img = np.where((below >= 0) & (below < 0.035 * (1 - pit / 0.07)), 210.0, img)  # RNFL
        img = np.where((depth >= rpe) & (depth < rpe + 0.035), 235.0, img)  # RPE
        img = np.where(depth >= rpe + 0.035, 130.0 * np.exp(-(depth - rpe) / 0.15), img)
        img *= rng.gamma(4.0, 0.25, size=(rows, cols)).astype(np.float32)  # speckle
        out[f] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def fundus_photo(shape: tuple[int, int], laterality: str, seed: int) -> np.ndarray:
    """A colour fundus (rows, cols, RGB): orange disc of retina, yellow optic disc on the
    nasal side (right of the image for a right eye), darker macula, dark vessel arcs."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[-1.0 : 1.0 : rows * 1j, -1.0 : 1.0 : cols * 1j]
    r = np.sqrt(xx**2 + yy**2)
    disc_x = 0.4 if laterality == "R" else -0.4
    shade = np.clip(1.0 - 0.5 * r**2, 0, 1)
    rgb = np.stack([200 * shade, 85 * shade, 35 * shade], axis=-1)
    rgb *= (1 - 0.35 * np.exp(-(xx**2 + yy**2) / 0.02))[..., None]  # macula
    disc = np.exp(-((xx - disc_x) ** 2 + yy**2) / 0.008)[..., None]
    rgb += disc * np.array([55.0, 150.0, 90.0])
    for bend in (1.2, -1.2, 0.6, -0.6):
        curve = 0.5 * bend * (xx - disc_x) ** 2 + 0.03 * np.sign(bend)  # arcades above/below
        vessel = (np.abs(yy - curve) < 0.012 + 0.01 * np.exp(-np.abs(xx - disc_x)))[..., None]
        rgb = np.where(vessel, rgb * np.array([0.65, 0.45, 0.45]), rgb)
    rgb += rng.normal(0.0, 3.0, size=rgb.shape)
    rgb[r > 0.97] = 0  # outside the camera's circular field
    return np.clip(rgb, 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------- junk


def notes_bytes(partition: str) -> bytes:
    return f"Export notes for {partition}\nOperator reminder: re-scan if quality < 50.\n".encode()


def truncated_bytes(part10: bytes) -> bytes:
    """A real file cut inside OtherPatientIDsSequence, in the middle of the patient header.

    That sequence is written with undefined length, which pydicom parses eagerly, so the
    cut makes `dcmread` raise instead of returning a silently partial dataset."""
    marker = b"\x10\x00\x02\x10SQ\x00\x00\xff\xff\xff\xff"
    at = part10.index(marker)
    return part10[: at + len(marker) + 8 + 8 + 3]  # item header, element header, 3 value bytes


def garbage_bytes(seed: int) -> bytes:
    """Preamble + DICM, then noise behind an undefined-length sequence header, so readers
    that trust the magic number alone fail (pydicom runs off the end of the sequence)."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, size=int(rng.integers(200, 600)), dtype=np.uint8).tobytes()
    return b"\x00" * 128 + b"DICM" + b"\x08\x00\x15\x11SQ\x00\x00\xff\xff\xff\xff" + noise
