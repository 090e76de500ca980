"""Input contracts: typed structs per topic, one-pass decode and validation with a specific
quarantine reason per defect, canonical payload hashing and the published JSON Schemas."""

from .bounds import MAX_ABS_CENTS, MAX_ID_LENGTH, MAX_REVISION, SUPPORTED_SCHEMA_VERSIONS
from ..hashing import digest
from .canonical import CLOCK_FAULT_US
from .core import (Contract, canonical_hash, decode, parse_line, payload_hash, quarantine_text,
                   validate)
from .record import InvalidRecord, Record
from .topics import CONTRACTS, MERCHANT_CATEGORY, PAYMENT, RECEIPT, RISK_SIGNAL, register

__all__ = ["CLOCK_FAULT_US", "CONTRACTS", "Contract", "InvalidRecord", "MAX_ABS_CENTS",
           "MAX_ID_LENGTH", "MAX_REVISION", "MERCHANT_CATEGORY", "PAYMENT", "RECEIPT",
           "RISK_SIGNAL", "Record", "SUPPORTED_SCHEMA_VERSIONS", "canonical_hash", "decode",
           "digest", "parse_line", "payload_hash", "quarantine_text", "register", "validate"]
