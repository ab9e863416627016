"""What is known to give the same result each time a ``tf.data`` pipeline runs.

The allow-list :func:`colab_resume.data.graph.same_every_iteration`
judges a pipeline by. Only what is named here is trusted: a dataset kind or
an op that is not listed, whatever it is, makes the pipeline "not the same
every iteration". Missing something that does repeat costs speed only (no
epoch span, :mod:`colab_resume.agent.spans`); trusting something that does
not, say a Keras ``RandomFlip`` in ``Dataset.map``, whose seed lives in a
variable the function reads and advances, costs an exact resume.

Ops are listed when their outputs are a function of their inputs alone:
no variable or resource they read (a variable, a lookup table, a seed
generator can change between runs), no stateful random op, no Python code
(``py_function``, ``numpy_function``, ``from_generator``), nothing whose
result depends on timing or thread order. Ops that call functions
(``If``, ``While``, ``PartitionedCall`` ...) are listed because the
functions they call are judged too, op by op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SHAPES = """
Const Identity IdentityN Placeholder NoOp StopGradient PreventGradient
EnsureShape Snapshot CheckNumerics CheckNumericsV2 Assert
Shape ShapeN Size Rank Reshape ExpandDims Squeeze Transpose ConjugateTranspose
Concat ConcatV2 Pack Unpack Split SplitV Slice StridedSlice Gather GatherV2
GatherNd ScatterNd TensorScatterUpdate TensorScatterAdd TensorScatterSub
TensorScatterMax TensorScatterMin Tile Fill ZerosLike OnesLike Range LinSpace
OneHot Pad PadV2 MirrorPad ReverseV2 Where BroadcastTo BroadcastArgs
BroadcastGradientArgs InvertPermutation Unique UniqueV2 UniqueWithCounts
UniqueWithCountsV2 TopKV2 Bucketize Diag DiagPart MatrixBandPart MatrixDiagV3
MatrixDiagPartV3 MatrixSetDiagV3 BatchToSpaceND SpaceToBatchND DepthToSpace
SpaceToDepth ListDiff Cast Bitcast
"""

_MATH = """
Add AddV2 AddN Sub Mul MulNoNan Div DivNoNan RealDiv TruncateDiv FloorDiv
FloorMod Mod TruncateMod Maximum Minimum Neg Abs Square SquaredDifference Sqrt
Rsqrt Reciprocal Inv Exp Expm1 Log Log1p Pow Sigmoid Tanh Relu Relu6 Elu Selu
Softplus Softsign LeakyRelu Softmax LogSoftmax Sign Round Rint Floor Ceil Sin
Cos Tan Asin Acos Atan Atan2 Sinh Cosh Erf Erfc Lgamma Digamma IsNan IsInf
IsFinite ClipByValue MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3 Einsum
Cross Sum Mean Max Min Prod All Any ArgMax ArgMin EuclideanNorm Cumsum Cumprod
Equal NotEqual Less LessEqual Greater GreaterEqual ApproximateEqual LogicalAnd
LogicalOr LogicalNot Select SelectV2 BitwiseAnd BitwiseOr BitwiseXor
LeftShift RightShift Invert PopulationCount Complex Real Imag ComplexAbs Conj
Angle BiasAdd L2Loss SegmentSum SegmentMean SegmentMax SegmentMin SegmentProd
UnsortedSegmentSum UnsortedSegmentMax UnsortedSegmentMin UnsortedSegmentProd
HistogramFixedWidth Conv2D DepthwiseConv2dNative AvgPool MaxPool MaxPoolV2
FFT IFFT RFFT IRFFT FFT2D IFFT2D RFFT2D IRFFT2D
"""

_STRINGS_AND_PARSING = """
StringJoin StringSplitV2 StringToNumber StringToHashBucket
StringToHashBucketFast StringToHashBucketStrong RegexReplace StaticRegexReplace
RegexFullMatch StaticRegexFullMatch Substr StringLength StringLower StringUpper
StringStrip AsString StringFormat ReduceJoin StringNGrams UnicodeDecode
UnicodeDecodeWithOffsets UnicodeEncode UnicodeTranscode UnicodeScript
DecodeBase64 EncodeBase64 DecodeRaw DecodePaddedRaw DecodeCSV DecodeCompressed
ParseExample ParseExampleV2 ParseSingleExample ParseSequenceExample
ParseSequenceExampleV2 ParseSingleSequenceExample ParseTensor SerializeTensor
SerializeSparse DeserializeSparse ReadFile
"""

_IMAGES = """
DecodeJpeg DecodeAndCropJpeg DecodePng DecodeBmp DecodeGif DecodeImage
DecodeWebP EncodeJpeg EncodePng ExtractJpegShape ResizeBilinear
ResizeNearestNeighbor ResizeBicubic ResizeArea ScaleAndTranslate CropAndResize
AdjustContrastv2 AdjustHue AdjustSaturation RGBToHSV HSVToRGB
ImageProjectiveTransformV2 ImageProjectiveTransformV3 ExtractImagePatches
NonMaxSuppressionV3 NonMaxSuppressionV4 NonMaxSuppressionV5
"""

_RAGGED_AND_SPARSE = """
RaggedTensorToTensor RaggedTensorFromVariant RaggedTensorToVariant
RaggedTensorToSparse RaggedGather RaggedRange SparseReshape SparseSlice
SparseConcat SparseToDense SparseReorder SparseFillEmptyRows
SparseTensorDenseMatMul SparseSegmentSum SparseSegmentMean
"""

# The stateless random ops: a function of their seed input, which is judged
# like any other input (a seed read from a variable is not trusted).
_STATELESS_RANDOM = """
StatelessRandomUniform StatelessRandomUniformV2 StatelessRandomUniformInt
StatelessRandomUniformIntV2 StatelessRandomUniformFullInt
StatelessRandomUniformFullIntV2 StatelessRandomNormal StatelessRandomNormalV2
StatelessTruncatedNormal StatelessTruncatedNormalV2 StatelessMultinomial
StatelessRandomBinomial StatelessRandomGammaV2 StatelessRandomGammaV3
StatelessRandomPoisson StatelessParameterizedTruncatedNormal StatelessShuffle
StatelessSampleDistortedBoundingBox StatelessRandomGetKeyCounter
StatelessRandomGetKeyCounterAlg StatelessRandomGetAlg
"""

# Calls and control flow, and the TensorList ops of AutoGraph's loops; the
# functions called are judged op by op.
_CALLS = """
If StatelessIf While StatelessWhile Case StatelessCase PartitionedCall
StatefulPartitionedCall TensorListReserve TensorListSetItem TensorListGetItem
TensorListStack TensorListFromTensor TensorListLength TensorListElementShape
TensorListPushBack TensorListPopBack TensorListConcatV2 TensorListGather
TensorListScatterIntoExistingList TensorListResize EmptyTensorList
"""

# Datasets built inside a function (``interleave``, ``flat_map`` ...), whose
# own functions are judged too. No shuffle: seeded in the function, its
# seed is an input this list cannot vouch for.
_DATASETS_IN_FUNCTIONS = """
RangeDataset TensorDataset TensorSliceDataset BatchDatasetV2
PaddedBatchDatasetV2 MapDataset FilterDataset TakeDataset SkipDataset
RepeatDataset PrefetchDataset FlatMapDataset InterleaveDataset ZipDataset
ConcatenateDataset UnbatchDataset WindowDataset ShardDataset TFRecordDataset
TFRecordDatasetV2 TextLineDataset FixedLengthRecordDataset
FixedLengthRecordDatasetV2 DatasetCardinality
"""

OPS = frozenset(
    " ".join(
        (
            _SHAPES,
            _MATH,
            _STRINGS_AND_PARSING,
            _IMAGES,
            _RAGGED_AND_SPARSE,
            _STATELESS_RANDOM,
            _CALLS,
            _DATASETS_IN_FUNCTIONS,
        )
    ).split()
)

# Parallel dataset ops in a function: in order unless asked not to be
# ("default" follows the pipeline's options, judged separately).
ORDERED_OPS = frozenset(
    {"ParallelMapDatasetV2", "ParallelInterleaveDatasetV4", "ParallelBatchDataset"}
)
_ORDERED = ("true", "default")


def op_repeats(kind: str, attr: Callable[[str], Any]) -> bool:
    """True when an op of type ``kind`` is on the allow-list.

    Args:
        kind: the op's type (``"MapDataset"``).
        attr: the op's attribute by name; raises for one it lacks.
    """
    if kind in OPS:
        return True
    if kind in ORDERED_OPS:
        try:
            return _text(attr("deterministic")) in _ORDERED
        except Exception:  # an op of another version: not known to be ordered
            return False
    return False


def _always(node: Any) -> bool:
    return True


def _ordered(node: Any) -> bool:
    return getattr(node, "_deterministic", None) in _ORDERED


def _not_reshuffled(node: Any) -> bool:
    return getattr(node, "_reshuffle_each_iteration", True) is False


def _not_rerandomized(node: Any) -> bool:
    # None is the argument's default: not rerandomized. Seeds 0 and 0 (no
    # seed, no global seed) make the kernel draw new ones at each iteration.
    seeds = (int(node._seed), int(node._seed2))
    return getattr(node, "_rerandomize", True) in (None, False) and seeds != (0, 0)


# The Python dataset classes (``type(dataset).__name__``) of tf.data's
# transformations that repeat when their inputs and functions do, each with
# what it must also hold. A class another TensorFlow version names
# differently is unknown, and so not trusted.
DATASETS: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(
        """
        _RangeDataset _TensorDataset _TensorSliceDataset _SparseTensorSliceDataset
        TFRecordDatasetV2 _TFRecordDataset TextLineDatasetV2 _TextLineDataset
        FixedLengthRecordDatasetV2 _FixedLengthRecordDataset
        _MapDataset _BatchDataset _PaddedBatchDataset _UnbatchDataset
        _RestructuredDataset _TakeDataset _SkipDataset _RepeatDataset
        _PrefetchDataset CacheDataset _FilterDataset _FlatMapDataset
        _InterleaveDataset _ZipDataset _ConcatenateDataset _OptionsDataset
        _ShardDataset _WindowDataset _ScanDataset _AssertCardinalityDataset
        _TakeWhileDataset _UniqueDataset _RebatchDataset _IgnoreErrorsDataset
        _GroupByWindowDataset _DirectedInterleaveDataset _DenseToRaggedDataset
        _DenseToSparseBatchDataset
        """.split(),
        _always,
    ),
    "_ParallelMapDataset": _ordered,
    "_ParallelBatchDataset": _ordered,
    "_ShuffleDataset": _not_reshuffled,
    "_RandomDataset": _not_rerandomized,
}


def dataset_repeats(node: Any) -> bool:
    """True when ``node``'s kind is on the allow-list and its settings repeat
    (its inputs and functions are judged apart)."""
    check = DATASETS.get(type(node).__name__)
    try:
        return check is not None and bool(check(node))
    except Exception:  # settings this version stores otherwise: unknown
        return False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
