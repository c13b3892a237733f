#!/usr/bin/env python3
"""Writes the tiny ONNX models the `onnxruntime` engine tests load (models/src/engine/onnxruntime.rs).

Run from anywhere: `python3 models/tests/data/make_fixtures.py` (needs the `onnx` package).
The output is deterministic; commit the .onnx files it writes next to this script.

- ort_add_relu.onnx   y = Relu(a + b), float32 [2, 3] inputs a and b.
- ort_qlinearconv.onnx  int8 QLinearConv, x int8 [1, 1, 3, 3], a constant 2x2 int8 kernel,
                      bias 10, scales 1, x/w zero points 0, y zero point 3, output y int8 [1, 1, 2, 2].
- ort_types.onnx      u8 [4] -> Cast -> f32 [4], i32 [2] -> Cast -> i64 [2].
- ort_dynamic.onnx    y = Relu(x), x float32 [N, 4] with a named symbolic dimension N.
- ort_unnamed_dim.onnx  y = Relu(x), x float32 [?, 4] with an unnamed dynamic dimension.
- ort_float16.onnx    y = Relu(x), x float16 [2] (an element type the engines do not take).
"""

import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save(graph, name):
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        producer_name="redline make_fixtures.py",
    )
    # IR 8 / opset 13: loadable by any ONNX Runtime from 1.10 on.
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, os.path.join(HERE, name))


def relu(x_type, shape, name):
    x = helper.make_tensor_value_info("x", x_type, shape)
    y = helper.make_tensor_value_info("y", x_type, shape)
    save(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]), name)


def main():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    save(helper.make_graph(nodes, "add_relu", [a, b], [y]), "ort_add_relu.onnx")

    x = helper.make_tensor_value_info("x", TensorProto.INT8, [1, 1, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT8, [1, 1, 2, 2])
    inits = [
        helper.make_tensor("x_scale", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("x_zp", TensorProto.INT8, [], [0]),
        helper.make_tensor("w", TensorProto.INT8, [1, 1, 2, 2], [1, 2, -1, 3]),
        helper.make_tensor("w_scale", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("w_zp", TensorProto.INT8, [], [0]),
        helper.make_tensor("y_scale", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("y_zp", TensorProto.INT8, [], [3]),
        helper.make_tensor("bias", TensorProto.INT32, [1], [10]),
    ]
    conv = helper.make_node(
        "QLinearConv",
        ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
        ["y"],
        kernel_shape=[2, 2],
    )
    save(helper.make_graph([conv], "qlinearconv", [x], [y], initializer=inits), "ort_qlinearconv.onnx")

    u = helper.make_tensor_value_info("u", TensorProto.UINT8, [4])
    i = helper.make_tensor_value_info("i", TensorProto.INT32, [2])
    uf = helper.make_tensor_value_info("uf", TensorProto.FLOAT, [4])
    il = helper.make_tensor_value_info("il", TensorProto.INT64, [2])
    nodes = [
        helper.make_node("Cast", ["u"], ["uf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["i"], ["il"], to=TensorProto.INT64),
    ]
    save(helper.make_graph(nodes, "types", [u, i], [uf, il]), "ort_types.onnx")

    relu(TensorProto.FLOAT, ["N", 4], "ort_dynamic.onnx")
    relu(TensorProto.FLOAT, [None, 4], "ort_unnamed_dim.onnx")
    relu(TensorProto.FLOAT16, [2], "ort_float16.onnx")


if __name__ == "__main__":
    main()
