"""A synthetic eye hospital: deterministic DICOM (OPT volumes, OP photographs), clinical extracts and
broken files in the landing layout, with the ground truth the tests check against.

Test and demo data only: it is not part of the platform's core and is never shipped to Spark executors.
"""

from synth.hospital import (DIAGNOSES, SITE_A_COLUMNS, SITE_B_COLUMNS, HospitalSummary, InstanceTruth,
                            PatientTruth, generate_hospital, main)

__all__ = ["DIAGNOSES", "SITE_A_COLUMNS", "SITE_B_COLUMNS", "HospitalSummary", "InstanceTruth", "PatientTruth",
           "generate_hospital", "main"]
