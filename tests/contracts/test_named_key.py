"""The named-data key format (`contracts.named_key`): built and read in one module — a key is
`tte/sha256/` and the bytes' SHA-256 in lowercase hex, and only such a string reads back as a
digest."""
import hashlib

from torch_tensorrt_ext.contracts.named_key import KEY_PREFIX, is_named_key, key_digest, named_key


def test_a_key_names_its_bytes_digest_and_reads_back():
    key = named_key(b"abc")
    assert key == "tte/sha256/" + hashlib.sha256(b"abc").hexdigest() and key.startswith(KEY_PREFIX)
    assert is_named_key(key) and key_digest(key) == hashlib.sha256(b"abc").digest()
    assert named_key(memoryview(b"abc")) == key


def test_a_string_of_another_form_is_no_key():
    hexdigest = hashlib.sha256(b"abc").hexdigest()
    for other in ("tte/sha256/" + hexdigest.upper(), "tte/sha256/" + hexdigest[:-1],
                  "tte/md5/" + hexdigest, "weights/" + hexdigest, "tte/sha256/x/" + hexdigest):
        assert not is_named_key(other) and key_digest(other) is None
