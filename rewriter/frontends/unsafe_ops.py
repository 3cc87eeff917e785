"""TensorFlow ops a model file may not run without ``--unsafe``: they touch the file system, the
network or Python.

A graph is code: a GraphDef, a SavedModel's function library or a TF1 ``.meta`` can hold ops that
read or write files (``ReadFile``, ``WriteFile``, checkpoint ``SaveV2``/``RestoreV2``, dataset and
reader ops, summary writers, debug dumps), open network connections (RPC, tf.data service) or
call back into Python (``PyFunc``, ``EagerPyFunc``). Running such a graph runs whatever its author
chose, so the front ends refuse it before anything executes it (see :mod:`rewriter.frontends.
safety`).

How the list was derived (TensorFlow 2.21, 1,910 registered ops): every op whose ``OpDef`` has a
string input or string attribute named like a file, a path, a pattern, a URL or a network address
(``filename``, ``file_pattern``, ``prefix``, ``logdir``, ``dump_root``, ``debug_urls``,
``output_stream``, ``descriptor_source``, ``address``, ...), or whose name says it reads, writes,
saves, restores, dumps, summarises into a writer or calls Python/RPC, was reviewed by hand and
put either here or in :data:`REVIEWED_SAFE` with the reason. ``tests/test_safety.py`` repeats the
derivation against the installed TensorFlow, so an op added by a TF upgrade fails the test until
someone classifies it.
"""

from __future__ import annotations

#: Ops that call back into Python (a token names a callable registered in the running process).
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

#: Checkpoint file I/O. Allowed only inside the standard saver's own save/restore path of a
#: SavedModel or ``.meta`` (the ``saver_def`` targets), which nothing else in the graph uses.
CHECKPOINT_OPS = frozenset({
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice",
    "MergeV2Checkpoints", "DTensorRestoreV2",
})

#: Ops that read, list or write files (or map them into memory).
FILE_OPS = frozenset({
    # plain files and directories
    "ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "FileSystemSetConfiguration",
    # checkpoint readers outside the saver
    "LoadAndRemapMatrix", "GenerateVocabRemapping", "CalibrationStatisticsSaver",
    # TF1 readers and the ops driving them
    "TFRecordReader", "TFRecordReaderV2", "TextLineReader", "TextLineReaderV2",
    "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "WholeFileReader",
    "WholeFileReaderV2", "IdentityReader", "IdentityReaderV2", "LMDBReader", "RecordInput",
    "ReaderRead", "ReaderReadV2", "ReaderReadUpTo", "ReaderReadUpToV2", "ReaderReset",
    "ReaderResetV2", "ReaderRestoreState", "ReaderRestoreStateV2", "ReaderSerializeState",
    "ReaderSerializeStateV2", "ReaderNumRecordsProduced", "ReaderNumRecordsProducedV2",
    "ReaderNumWorkUnitsCompleted", "ReaderNumWorkUnitsCompletedV2",
    # tf.data sources and sinks that name files
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset",
    "LMDBDataset", "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset",
    "MatchingFilesDataset", "ExperimentalMatchingFilesDataset", "CacheDataset",
    "CacheDatasetV2", "SaveDataset", "SaveDatasetV2", "LoadDataset", "DistributedSave",
    "SnapshotDataset", "SnapshotDatasetV2", "SnapshotDatasetReader", "SnapshotChunkDataset",
    "SnapshotNestedDatasetReader", "ListSnapshotChunksDataset", "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord",
    # vocabulary files
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2", "Skipgram",
    "FixedUnigramCandidateSampler",
    # summary writers and debugger dumps
    "SummaryWriter", "CreateSummaryFileWriter", "CreateSummaryDbWriter", "WriteSummary",
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary",
    "WriteGraphSummary", "WriteRawProtoSummary", "FlushSummaryWriter", "CloseSummaryWriter",
    "StatsAggregatorSetSummaryWriter", "DumpTensor", "DebugIdentity", "DebugIdentityV2",
    "DebugIdentityV3", "DebugNanCount", "DebugNumericSummary", "DebugNumericSummaryV2",
})

#: Ops that talk to other processes or machines.
NETWORK_OPS = frozenset({
    "RpcClient", "RpcServer", "RpcServerStart", "RpcServerRegister", "RpcCall",
    "RpcCheckStatus", "RpcGetValue", "DeleteRpcFutureResource", "RemoteCall",
    "RegisterDataset", "RegisterDatasetV2", "DataServiceDataset", "DataServiceDatasetV2",
    "DataServiceDatasetV3", "DataServiceDatasetV4",
})

#: Ops that are safe with some attribute values only: op -> (attr, safe value prefixes).
#: ``PrintV2`` may print to a ``file://`` path; the proto codecs may read a descriptor file.
CONDITIONAL_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "PrintV2": ("output_stream", ("stderr", "stdout", "log(")),
    "DecodeProtoV2": ("descriptor_source", ("local://", "bytes://")),
    "EncodeProto": ("descriptor_source", ("local://", "bytes://")),
}

#: Why each category is refused, as the error message says it.
CATEGORIES = (
    (PYTHON_OPS, "runs Python"),
    (CHECKPOINT_OPS, "reads or writes checkpoint files"),
    (FILE_OPS, "reads or writes files"),
    (NETWORK_OPS, "opens network connections"),
)

#: Ops the derivation flags by name or argument names that were reviewed and do no I/O.
REVIEWED_SAFE = frozenset({
    # pure string work on names (the saver builds file names with them but opens nothing)
    "ShardedFilename", "ShardedFilespec",
    # regex ops: "pattern" is a regular expression
    "RegexFullMatch", "RegexReplace", "StaticRegexFullMatch", "StaticRegexReplace",
    # summaries that only serialise a proto into a string tensor (writing needs a writer op)
    "HistogramSummary", "ScalarSummary", "ImageSummary", "AudioSummary", "AudioSummaryV2",
    "TensorSummary", "TensorSummaryV2", "MergeSummary", "StatsAggregatorSummary",
    "ExperimentalStatsAggregatorSummary", "SetStatsAggregatorDataset",
    "ExperimentalSetStatsAggregatorDataset", "BoostedTreesMakeStatsSummary",
    "BoostedTreesExampleDebugOutputs",
    # printing to stderr (PrintV2 is checked by its output_stream)
    "Print",
    # identity ops for the debugger's gradients (no URL attribute)
    "DebugGradientIdentity", "DebugGradientRefIdentity",
    # in-memory caches and tensor copies
    "DummyMemoryCache", "AnonymousMemoryCache", "DeleteMemoryCache", "Snapshot",
    # "source"/"direction"/"sharding" attributes that are not paths
    "TensorArrayGrad", "TensorArrayGradV2", "TensorArrayGradV3", "TensorArrayGradWithShape",
    "CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2",
    "CudnnRNNBackpropV3", "CudnnRNNParamsSize", "CudnnRNNParamsToCanonical",
    "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2",
    "RiscSort", "XlaSharding", "XlaSpmdFullToShardShape", "XlaSpmdShardToFullShape",
    "XlaCustomCall", "XlaCustomCallV2",
    # TPU embedding parameter loads: TPU memory, no CPU kernel
    "LoadAllTPUEmbeddingParameters", "LoadTPUEmbeddingADAMParameters",
    "LoadTPUEmbeddingAdadeltaParameters", "LoadTPUEmbeddingAdagradMomentumParameters",
    "LoadTPUEmbeddingAdagradParameters", "LoadTPUEmbeddingCenteredRMSPropParameters",
    "LoadTPUEmbeddingFTRLParameters", "LoadTPUEmbeddingFrequencyEstimatorParameters",
    "LoadTPUEmbeddingMDLAdagradLightParameters", "LoadTPUEmbeddingMomentumParameters",
    "LoadTPUEmbeddingProximalAdagradParameters", "LoadTPUEmbeddingProximalYogiParameters",
    "LoadTPUEmbeddingRMSPropParameters",
    "LoadTPUEmbeddingStochasticGradientDescentParameters",
})

UNSAFE_OPS = PYTHON_OPS | CHECKPOINT_OPS | FILE_OPS | NETWORK_OPS


def why_unsafe(op: str) -> str | None:
    """The reason ``op`` is refused (whatever its attributes), or None."""
    for ops, why in CATEGORIES:
        if op in ops:
            return why
    return None
