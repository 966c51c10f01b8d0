package main

import (
	"fmt"
	"sort"
	"strings"
)

// DType is TensorFlow's DataType enum (types.proto; the C API's TF_DataType is the same).
type DType int32

const (
	DTInvalid    DType = 0
	DTFloat      DType = 1
	DTDouble     DType = 2
	DTInt32      DType = 3
	DTUint8      DType = 4
	DTInt16      DType = 5
	DTInt8       DType = 6
	DTString     DType = 7
	DTComplex64  DType = 8
	DTInt64      DType = 9
	DTBool       DType = 10
	DTBfloat16   DType = 14
	DTUint16     DType = 17
	DTComplex128 DType = 18
	DTHalf       DType = 19
	DTUint32     DType = 22
	DTUint64     DType = 23
)

var dtypeNames = map[DType]string{
	DTFloat: "DT_FLOAT", DTDouble: "DT_DOUBLE", DTInt32: "DT_INT32", DTUint8: "DT_UINT8",
	DTInt16: "DT_INT16", DTInt8: "DT_INT8", DTString: "DT_STRING", DTComplex64: "DT_COMPLEX64",
	DTInt64: "DT_INT64", DTBool: "DT_BOOL", DTBfloat16: "DT_BFLOAT16", DTUint16: "DT_UINT16",
	DTComplex128: "DT_COMPLEX128", DTHalf: "DT_HALF", DTUint32: "DT_UINT32", DTUint64: "DT_UINT64",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return "DT_INVALID"
}

// Size is the bytes of one element (0: strings or a type not served).
func (d DType) Size() int {
	switch d {
	case DTUint8, DTInt8, DTBool:
		return 1
	case DTInt16, DTUint16, DTHalf, DTBfloat16:
		return 2
	case DTFloat, DTInt32, DTUint32:
		return 4
	case DTDouble, DTInt64, DTUint64, DTComplex64:
		return 8
	case DTComplex128:
		return 16
	}
	return 0
}

// Tensor is a dense tensor: numbers packed little-endian in Data, or Strings.
type Tensor struct {
	DType   DType
	Shape   []int64
	Data    []byte
	Strings [][]byte
}

// NumElements is the product of the shape.
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	return n
}

// Rows is the first dimension (-1 for a scalar).
func (t *Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return -1
	}
	return int(t.Shape[0])
}

// rowSize is the elements of one row (the product of every dimension but the first).
func (t *Tensor) rowSize() int {
	n := 1
	for _, d := range t.Shape[1:] {
		n *= int(d)
	}
	return n
}

// Slice is rows [start, end) (sharing the data).
func (t *Tensor) Slice(start, end int) *Tensor {
	shape := append([]int64{int64(end - start)}, t.Shape[1:]...)
	row := t.rowSize()
	out := &Tensor{DType: t.DType, Shape: shape}
	if t.DType == DTString {
		out.Strings = t.Strings[start*row : end*row]
	} else {
		size := t.DType.Size() * row
		out.Data = t.Data[start*size : end*size]
	}
	return out
}

// Concat stacks tensors of one dtype and row shape along the first dimension, padded
// with copies of the first row up to `size` rows.
func Concat(parts []*Tensor, size int) *Tensor {
	first := parts[0]
	rows := 0
	for _, p := range parts {
		rows += p.Rows()
	}
	shape := append([]int64{int64(size)}, first.Shape[1:]...)
	out := &Tensor{DType: first.DType, Shape: shape}
	if first.DType == DTString {
		out.Strings = make([][]byte, 0, size*first.rowSize())
		for _, p := range parts {
			out.Strings = append(out.Strings, p.Strings...)
		}
		for r := rows; r < size; r++ {
			out.Strings = append(out.Strings, first.Slice(0, 1).Strings...)
		}
		return out
	}
	rowBytes := first.rowSize() * first.DType.Size()
	out.Data = make([]byte, 0, size*rowBytes)
	for _, p := range parts {
		out.Data = append(out.Data, p.Data...)
	}
	for r := rows; r < size; r++ {
		out.Data = append(out.Data, first.Data[:rowBytes]...)
	}
	return out
}

// TensorInfo is one input or output of a signature.
type TensorInfo struct {
	Key        string
	DType      DType
	Shape      []int64 // -1 for an unknown dimension
	KnownRank  bool
	TensorName string
	output     tfOutput
}

// ShapeText is the shape as errors show it: [?,2] or <unknown>.
func (i *TensorInfo) ShapeText() string {
	if !i.KnownRank {
		return "<unknown>"
	}
	parts := make([]string, len(i.Shape))
	for k, d := range i.Shape {
		if d < 0 {
			parts[k] = "?"
		} else {
			parts[k] = fmt.Sprint(d)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Fits tells whether a shape fits the input's.
func (i *TensorInfo) Fits(shape []int64) bool {
	if !i.KnownRank {
		return true
	}
	if len(shape) != len(i.Shape) {
		return false
	}
	for k, want := range i.Shape {
		if want >= 0 && want != shape[k] {
			return false
		}
	}
	return true
}

// Signature is one SignatureDef's dense inputs and outputs.
type Signature struct {
	Inputs     map[string]*TensorInfo
	Outputs    map[string]*TensorInfo
	MethodName string
	inputList  []*TensorInfo // sorted by key
	outputList []*TensorInfo
}

func sortedInfos(m map[string]*TensorInfo) []*TensorInfo {
	out := make([]*TensorInfo, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out
}

// InputNames is the input names, sorted.
func (s *Signature) InputNames() []string {
	out := make([]string, len(s.inputList))
	for i, v := range s.inputList {
		out[i] = v.Key
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func shapeString(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}
