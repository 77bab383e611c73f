"""The blob readers' refusal vocabulary (docs/CONTRACTS.md §1 "Check ids"): `BlobError` and the
stable check id every refusal carries.

Invariant: every `BlobError` the readers raise names one id of `CHECKS` in `.check`; the C++
runtime's reader refuses the same input under the same id (`tte_runtime_last_check`), so the
two readers are compared check for check (tests/contracts/test_blob_differential.py), while each
words its message in its own idiom. This module imports nothing of the package but `errors`.
"""
from __future__ import annotations


from ..errors import TteError

__all__ = ["BlobError", "CHECKS"]

# id -> what it refuses. Shared by both readers; the C++ runtime's init/execute ids
# (runtime.*, init.*, engine.*, payload.*, tensorrt.*, execute.*, plan.*) are its own.
CHECKS: dict[str, str] = {
    "blob.short": "the blob is shorter than its 32-byte header",
    "blob.magic": "the magic is not TR01, TR02 or TR03",
    "blob.metadata_offset": "the metadata starts inside the header",
    "blob.metadata_range": "the metadata runs past the end of the blob",
    "blob.engine_alignment": "the engine offset is not 16-byte aligned",
    "blob.engine_range": "the engine runs past the end of the blob",
    "blob.overlap": "the metadata overlaps the engine",
    "blob.metadata_digest": "the metadata does not hash to the header's SHA-256 (TR03)",
    "blob.engine_digest_missing": "a TR03 blob's metadata has no engine_sha256",
    "blob.engine_digest": "the engine payload does not hash to engine_sha256 (TR03)",
    "json.utf8": "the metadata is not UTF-8",
    "json.syntax": "the metadata is not JSON (a UTF-8 byte order mark included)",
    "json.depth": "arrays and objects nest more than 64 deep",
    "json.non_finite": "NaN, Infinity, -Infinity, or a number that overflows a double",
    "json.surrogate": "an unpaired UTF-16 surrogate escape",
    "json.duplicate_key": "an object holds a key twice",
    "json.nul": "a string holds a NUL character",
    "metadata.root": "the metadata is not a JSON object",
    "metadata.missing": "a required key is absent",
    "metadata.type": "a value of the wrong kind (an integer must fit int64)",
    "metadata.tr01_aliased": "a TR01 blob carries aliased_io",
    "metadata.damaged_magic": "a TR01/TR02 blob carries the TR03 key tte_version",
    "metadata.tte_version": "a TR03 blob's tte_version is not the integer 3, 4 or 5",
    "metadata.engine_kind": "engine_kind is not 'reference', 'tensorrt' or 'tensorrt_rtx'",
    "metadata.weight_streaming_budget": "weight_streaming_budget is not a non-negative integer",
    "metadata.engine_sha256": "engine_sha256 is not 64 lowercase hex digits",
    "weights.key": "a weight's key is empty",
    "weights.tensor": "a weight is not a static tensor of a known dtype within 2**63-1 bytes",
    "weights.engine_kind": "a TensorRT engine's blob lists weights (reference engines only)",
    "engine_data.key": "engine_data's key is not tte/sha256/ and 64 lowercase hex digits",
    "engine_data.nbytes": "engine_data's nbytes is below 1",
    "engine_data.engine_kind": "a reference engine's blob carries engine_data (TensorRT only)",
    "engine_data.payload": "a blob with engine_data carries a non-empty payload",
    "binding.empty_name": "a binding has an empty name",
    "binding.unknown_dtype": "a dtype no binding carries",
    "binding.shape": "a shape holds something other than int64 integers >= -1",
    "binding.unknown_in_tr03": "a TR03 binding leaves its dtype to the tensors (dtype '')",
    "binding.unknown_with_shape": "a binding with dtype '' has a shape",
    "binding.unknown_size": "the byte size of a binding the blob leaves unknown was asked for",
    "binding.duplicate": "two bindings share a name",
    "binding.too_large": "a binding holds more than 2**63-1 bytes",
    "binding.max_shape": "a max_shape that does not bound its binding's shape",
    "ref.missing": "a name refers to no binding",
    "ref.direction": "a name refers to a binding of the other direction",
    "aliased.mismatch": "an aliased pair differs in dtype or shape",
    "aliased.twice": "an output is aliased twice",
    "writer.twice": "an input is written by two outputs",
    "delegate_inputs.duplicate": "delegate_inputs lists a binding twice",
    "delegate_inputs.missing": "an input binding is not a delegate input",
    "delegate_outputs.duplicate": "delegate_outputs lists a binding twice",
    "buffers.empty_fqn": "a buffer has an empty FQN",
    "buffers.duplicate_input": "buffers lists an input binding twice",
    "buffers.duplicate_fqn": "one buffer FQN is bound to two inputs",
    "copy_back.mismatch": "a copy-back pair differs in dtype or shape",
    "copy_back.aliased": "an output is both aliased and copy-back",
    "copy_back.duplicate": "copy_back lists an output twice",
    "copy_back.dynamic_scratch": "a copy-back output needing a scratch has a dynamic shape",
    "output.dropped": "an output is neither a delegate output, aliased nor copy-back",
}


class BlobError(TteError, ValueError):
    """A delegate blob is malformed or inconsistent; the message says what and where, `.check`
    is the stable id of the refusing check (an id of `CHECKS`)."""

    def __init__(self, message: str, check: str = "blob.invalid") -> None:
        super().__init__(message)
        self.check = check
