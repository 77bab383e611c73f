"""The floor of the package: the contracts every layer above shares.

- `plan`: the `MutationPlan` that carries decisions from stage to stage;
- `engine`: the engine interface as data (`EngineInfo`, `AliasedIO`);
- `engine_call`: how an engine call appears in a graph (`tte::execute_engine`, torch-tensorrt's
  ops) and its `Signature`;
- `blob_checks`, `blob_model`, `blob_json`, `blob_metadata`, `blob_validate`, `blob`: the delegate
  blob's check ids and `BlobError` (the same ids as the C++ reader's), its data model, its strict
  JSON reader, reading its metadata, validating it (the twins of runtime/src/blob_json.cpp,
  blob_metadata.cpp, blob_validate.cpp), and reading/writing it whole (docs/CONTRACTS.md §1);
- `dtypes`: the one binding dtype table;
- `target_device`: the one reader of a device string (a `target_device` compile spec);
- `shape_text`: the one shape printer;
- `shared_arenas`: the key of a program's record of the state arenas its methods share;
- `llm_metadata`: the constant methods ExecuTorch's LLM runner reads from a `.pte`, and their check.

Invariant: nothing here imports from this package except `errors` and other contracts
(tests/house/test_import_graph.py holds every layer to importing only layers below it).
"""
