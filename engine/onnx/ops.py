"""ONNX operator families as the importer and exporter see them: which fold, which pass through, which hold weights.

One table per question, so importing and exporting read the same families (Optimus Sec. 3 names the simple ops
that fold into their producer: BatchNorm, constant scale/bias, element-wise activations).
"""

from engine.graph import OpKind

# ops whose output shapes can depend on input values (detection post-processing): a part of the graph that
# starts at one of them with no static shape is left out, with a PartialImportWarning
DATA_DEPENDENT = {"NonZero", "NonMaxSuppression", "TopK", "If", "Loop", "Scan", "Unique", "Compress", "Resize",
                  "Upsample", "RoiAlign", "Reshape", "Expand", "Tile", "Range", "ConstantOfShape", "Slice", "Gather",
                  "GatherND", "GatherElements", "ScatterND", "Squeeze", "Unsqueeze", "Split", "Pad", "OneHot"}
PASSTHROUGH = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity"}  # vanish: readers read the source
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "PRelu", "Elu",
               "Selu", "Softplus", "Softsign", "Gelu", "Erf", "Mish", "ThresholdedRelu", "Celu", "Swish",
               # one-input element-wise math of written-out norms and activations (RMSNorm's Sqrt, GELU's pieces)
               "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs", "Cast", "Floor", "Ceil", "Round", "Sin", "Cos",
               "Sign", "Not"}
AFFINE = {"BatchNormalization", "Mul", "Add", "Sub", "Div"}  # with one constant operand
ELTWISE = {"Add", "Sum", "Mul", "Sub", "Div", "Max", "Min", "Mean", "Pow", "Where", "Equal", "Greater", "Less",
           "GreaterOrEqual", "LessOrEqual", "And", "Or", "Mod"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
KIND_BY_TYPE = {
    "Concat": OpKind.CONCAT, "Split": OpKind.SPLIT, "Slice": OpKind.SPLIT,
    "Transpose": OpKind.RESHAPE, "DepthToSpace": OpKind.RESHAPE, "SpaceToDepth": OpKind.RESHAPE,
    "Expand": OpKind.RESHAPE, "Tile": OpKind.RESHAPE,
    "Softmax": OpKind.SOFTMAX, "LogSoftmax": OpKind.SOFTMAX,
    "LRN": OpKind.NORM, "LayerNormalization": OpKind.NORM, "InstanceNormalization": OpKind.NORM,
    "GroupNormalization": OpKind.NORM, "LpNormalization": OpKind.NORM, "BatchNormalization": OpKind.NORM,
    "RMSNormalization": OpKind.NORM, "RotaryEmbedding": OpKind.ELTWISE,
}
COMPUTE_KINDS = (OpKind.CONV, OpKind.DWCONV, OpKind.MATMUL)
# ONNX input slots that hold parameters, by op type (everything else is an activation or a constant)
PARAM_SLOTS = {"Conv": {1, 2}, "ConvTranspose": {1, 2}, "Gemm": {1, 2}, "MatMul": {0, 1},
               "BatchNormalization": {1, 2}, "InstanceNormalization": {1, 2}, "LayerNormalization": {1, 2},
               "GroupNormalization": {1, 2}, "PRelu": {1}, "Mul": {0, 1}, "Add": {0, 1}, "Sub": {0, 1},
               "Div": {0, 1}}
BUFFER_SLOTS = {"BatchNormalization": {3, 4}}  # running statistics: inputs, not parameters
