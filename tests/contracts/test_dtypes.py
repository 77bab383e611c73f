"""One dtype table per language, and the two agree: the rows of
runtime/src/dtype.cpp (name, element size, ScalarType) are exactly `contracts.dtypes`' rows, and
every Python map of dtypes is derived from that table."""
import re

import torch
from executorch.exir import schema

from helpers import REPO
from torch_tensorrt_ext.contracts import dtypes

CPP = REPO / "runtime" / "src" / "dtype.cpp"
ROW = re.compile(r'\{DType::\w+, "(\w+)", (\d+), ScalarType::(\w+),')
# ExecuTorch's C++ ScalarType names -> its serialized schema's names
SCHEMA_NAME = {"Float": "FLOAT", "Half": "HALF", "BFloat16": "BFLOAT16", "Long": "LONG",
               "Int": "INT", "Char": "CHAR", "Byte": "BYTE", "Bool": "BOOL", "Double": "DOUBLE"}


def test_the_cpp_table_has_the_same_rows():
    rows = ROW.findall(CPP.read_text())
    assert len(rows) == len(dtypes.DTYPES) > 0
    cpp = {name: (int(size), int(getattr(schema.ScalarType, SCHEMA_NAME[st])))
           for name, size, st in rows}
    py = {name: (size, code) for code, name in dtypes.SCALAR_TYPE_NAMES.items()
          for size in [dtypes.DTYPES[name]]}
    assert cpp == py


def test_python_maps_derive_from_the_table():
    assert set(dtypes.TORCH_DTYPES) == set(dtypes.DTYPES) == set(dtypes.SCALAR_TYPE_NAMES.values())
    for name, size in dtypes.DTYPES.items():
        assert torch.empty((), dtype=dtypes.TORCH_DTYPES[name]).element_size() == size
        assert dtypes.dtype_name(dtypes.torch_dtype(name)) == name


def test_a_programs_int16_state_is_named_and_sized_like_the_rest():
    """`inspect` and the traffic count read a `.pte`'s tensors through `SCALAR_TYPES`: the
    bindings' dtypes plus int16, which state may hold though no engine binding takes it."""
    from torch_tensorrt_ext.executorch.inspecting.inspect_pte import dtype
    from torch_tensorrt_ext.executorch.inspecting.traffic import nbytes
    assert dtype(schema.ScalarType.SHORT) == "int16"
    assert dtype(schema.ScalarType.FLOAT) == "float32"
    for code, (name, size) in dtypes.SCALAR_TYPES.items():
        assert torch.empty((), dtype=getattr(torch, name)).element_size() == size
        t = schema.Tensor(scalar_type=schema.ScalarType(code), storage_offset=0, sizes=[2, 3],
                          dim_order=[0, 1], requires_grad=False, layout=0, data_buffer_idx=0,
                          allocation_info=None, shape_dynamism=schema.TensorShapeDynamism.STATIC)
        assert nbytes(t) == 6 * size, name
    assert set(dtypes.SCALAR_TYPES) - set(dtypes.SCALAR_TYPE_NAMES) == {2}
