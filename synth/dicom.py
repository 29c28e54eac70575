"""The OPT and OP dataset builders of the synthetic eye hospital.

`synth` decides *who* is imaged *when*; this module turns one planned image
(an `ImageSpec`) into a Part 10 file that is as valid as practical against the
Ophthalmic Tomography (OPT) and Ophthalmic Photography 8 Bit (OP) IODs, while carrying
the identifying values real exports carry (names, ids, addresses, staff, private tags).
Everything is derived from the inputs: no clock, no uuid4, no global random state.
"""

from __future__ import annotations

import io

from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian

from synth.pixels import fundus_photo, oct_volume
from synth.spec import ImageSpec

OPT_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.5.4"  # Ophthalmic Tomography Image Storage
OP_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.5.1"  # Ophthalmic Photography 8 Bit Image Storage
SOP_CLASS = {"OPT": OPT_SOP_CLASS, "OP": OP_SOP_CLASS}
PRIVATE_CREATOR = {"OPT": "SYNTH OCT VENDOR 1.0", "OP": "SYNTH FUNDUS VENDOR 1.0"}
PRIVATE_GROUP = 0x0009


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
    _set(ds, PatientName=p.name, PatientID=p.patient_id, IssuerOfPatientID=p.issuer,
         PatientBirthDate=p.birth_date, PatientSex=p.sex, PatientAddress=p.address,
         OtherPatientIDsSequence=[
             _item(PatientID=p.other_id, IssuerOfPatientID=p.other_issuer, TypeOfPatientID="TEXT")
         ],
         PatientAge=_age(p.birth_date, st.date))
    # Undefined length here also makes the truncated junk file fail loudly
    # (see synth.junk.truncated_bytes).
    _undefined_length(ds, "OtherPatientIDsSequence")
    _set(ds, StudyInstanceUID=st.uid, StudyDate=st.date, StudyTime=st.time, ReferringPhysicianName=s.referring,
         StudyID=st.study_id, AccessionNumber=st.accession, StudyDescription=st.description)
    _set(ds, Modality=spec.modality, SeriesInstanceUID=spec.series_uid, SeriesNumber=spec.series_number,
         SeriesDate=st.date, SeriesTime=st.time, SeriesDescription=spec.series_description,
         PerformingPhysicianName=s.performing, OperatorsName=s.operator,
         RequestAttributesSequence=[
             _item(RequestedProcedureID=st.requested_procedure_id,
                   ScheduledProcedureStepID=st.scheduled_step_id, AccessionNumber=st.accession)
         ])
    _set(ds, Manufacturer="Synthetic Ophthalmics Ltd",
         ManufacturerModelName="SynthOCT 3000" if spec.modality == "OPT" else "SynthFundus 200",
         DeviceSerialNumber=s.serial, SoftwareVersions="4.2.1", InstitutionName=s.institution,
         InstitutionAddress=s.address, StationName=s.station)


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
