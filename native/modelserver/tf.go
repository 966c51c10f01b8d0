package main

// TensorFlow's C API, from the TensorFlow wheel the project installs (libtensorflow_cc.so.2
// exports it; tools/modelserver/build.sh points cgo at the wheel's headers and folder).

/*
#cgo LDFLAGS: -l:libtensorflow_cc.so.2 -l:libtensorflow_framework.so.2
#include <stdlib.h>
#include <string.h>
#include "tensorflow/c/c_api.h"
#include "tensorflow/c/tf_tstring.h"

static TF_Tensor* new_numeric(TF_DataType dt, const int64_t* dims, int ndims, const void* data, size_t len) {
	TF_Tensor* t = TF_AllocateTensor(dt, dims, ndims, len);
	if (t != NULL && len > 0) memcpy(TF_TensorData(t), data, len);
	return t;
}

static TF_Tensor* new_strings(const int64_t* dims, int ndims, int64_t n) {
	TF_Tensor* t = TF_AllocateTensor(TF_STRING, dims, ndims, n * sizeof(TF_TString));
	if (t == NULL) return NULL;
	TF_TString* s = (TF_TString*)TF_TensorData(t);
	for (int64_t i = 0; i < n; i++) TF_StringInit(&s[i]);
	return t;
}

static void set_string(TF_Tensor* t, int64_t i, const char* data, size_t len) {
	TF_TString* s = (TF_TString*)TF_TensorData(t);
	TF_StringCopy(&s[i], data, len);
}

static void free_strings(TF_Tensor* t, int64_t n) {
	TF_TString* s = (TF_TString*)TF_TensorData(t);
	for (int64_t i = 0; i < n; i++) TF_StringDealloc(&s[i]);
	TF_DeleteTensor(t);
}

static const char* string_at(TF_Tensor* t, int64_t i, size_t* len) {
	TF_TString* s = (TF_TString*)TF_TensorData(t);
	*len = TF_StringGetSize(&s[i]);
	return TF_StringGetDataPointer(&s[i]);
}

static TF_Session* load(const char* dir, const void* config, size_t config_len, TF_Graph* graph, TF_Buffer* meta, TF_Status* status) {
	TF_SessionOptions* opts = TF_NewSessionOptions();
	if (config_len > 0) {
		TF_SetConfig(opts, config, config_len, status);
		if (TF_GetCode(status) != TF_OK) { TF_DeleteSessionOptions(opts); return NULL; }
	}
	const char* tags[] = {"serve"};
	TF_Session* s = TF_LoadSessionFromSavedModel(opts, NULL, dir, tags, 1, graph, meta, status);
	TF_DeleteSessionOptions(opts);
	return s;
}

*/
import "C"

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// tfOutput is an operation's output in the graph.
type tfOutput = C.TF_Output

// Model is one loaded SavedModel version: its session and its signatures.
type Model struct {
	session    *C.TF_Session
	graph      *C.TF_Graph
	Signatures map[string]*Signature
	// SignatureBytes: each served SignatureDef as the MetaGraphDef holds it (metadata).
	SignatureBytes map[string][]byte
}

// sessionConfig is a ConfigProto with the thread settings (intra_op 2, inter_op 5).
func sessionConfig(intraOp, interOp int) []byte {
	var b []byte
	if intraOp != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(intraOp)))
	}
	if interOp != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(interOp)))
	}
	return b
}

func statusError(status *C.TF_Status) error {
	code := int(C.TF_GetCode(status))
	if code == 0 {
		return nil
	}
	return &ServingError{Code: Code(code), Message: strings.TrimSpace(C.GoString(C.TF_Message(status)))}
}

// LoadModel loads the SavedModel at dir (tag "serve") into a session of its own.
func LoadModel(dir string, intraOp, interOp int) (*Model, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	status := C.TF_NewStatus()
	defer C.TF_DeleteStatus(status)
	graph := C.TF_NewGraph()
	meta := C.TF_NewBuffer()
	defer C.TF_DeleteBuffer(meta)
	config := sessionConfig(intraOp, interOp)
	var cfg unsafe.Pointer
	if len(config) > 0 {
		cfg = C.CBytes(config)
		defer C.free(cfg)
	}
	session := C.load(cdir, cfg, C.size_t(len(config)), graph, meta, status)
	if err := statusError(status); err != nil {
		C.TF_DeleteGraph(graph)
		return nil, err
	}
	raw := C.GoBytes(meta.data, C.int(meta.length))
	sigs, sigBytes, err := ParseMetaGraphSignatures(raw)
	if err != nil {
		closeSession(session, graph)
		return nil, err
	}
	m := &Model{session: session, graph: graph, Signatures: sigs, SignatureBytes: sigBytes}
	for name, sig := range sigs {
		if err := m.resolve(sig); err != nil {
			delete(sigs, name)
			delete(sigBytes, name)
		}
	}
	return m, nil
}

func closeSession(session *C.TF_Session, graph *C.TF_Graph) {
	status := C.TF_NewStatus()
	C.TF_CloseSession(session, status)
	C.TF_DeleteSession(session, status)
	C.TF_DeleteStatus(status)
	C.TF_DeleteGraph(graph)
}

// Close frees the session (no call may be running).
func (m *Model) Close() { closeSession(m.session, m.graph) }

// resolve finds each signature tensor's operation in the graph, once.
func (m *Model) resolve(sig *Signature) error {
	find := func(infos []*TensorInfo) error {
		for _, info := range infos {
			op, index := info.TensorName, 0
			if i := strings.LastIndexByte(info.TensorName, ':'); i >= 0 {
				n, err := strconv.Atoi(info.TensorName[i+1:])
				if err == nil {
					op, index = info.TensorName[:i], n
				}
			}
			cop := C.CString(op)
			oper := C.TF_GraphOperationByName(m.graph, cop)
			C.free(unsafe.Pointer(cop))
			if oper == nil {
				return fmt.Errorf("no operation %q in the graph", op)
			}
			info.output = C.TF_Output{oper: oper, index: C.int(index)}
		}
		return nil
	}
	if err := find(sig.inputList); err != nil {
		return err
	}
	return find(sig.outputList)
}

// Run feeds the inputs (by the signature's input names) and fetches every output.
func (m *Model) Run(sig *Signature, inputs map[string]*Tensor) (map[string]*Tensor, error) {
	n := len(sig.inputList)
	feeds := make([]C.TF_Output, n)
	values := make([]*C.TF_Tensor, n)
	defer func() {
		for i, v := range values {
			if v == nil {
				continue
			}
			t := inputs[sig.inputList[i].Key]
			if t.DType == DTString {
				C.free_strings(v, C.int64_t(len(t.Strings)))
			} else {
				C.TF_DeleteTensor(v)
			}
		}
	}()
	for i, info := range sig.inputList {
		t := inputs[info.Key]
		if t == nil {
			return nil, invalid("missing input %q", info.Key)
		}
		feeds[i] = info.output
		v, err := toTF(t)
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	k := len(sig.outputList)
	fetches := make([]C.TF_Output, k)
	for i, info := range sig.outputList {
		fetches[i] = info.output
	}
	outs := make([]*C.TF_Tensor, k)
	status := C.TF_NewStatus()
	defer C.TF_DeleteStatus(status)
	var pin runtime.Pinner
	defer pin.Unpin()
	var feedPtr *C.TF_Output
	var valuePtr **C.TF_Tensor
	if n > 0 {
		pin.Pin(&feeds[0])
		pin.Pin(&values[0])
		feedPtr, valuePtr = &feeds[0], &values[0]
	}
	pin.Pin(&fetches[0])
	pin.Pin(&outs[0])
	C.TF_SessionRun(m.session, nil, feedPtr, valuePtr, C.int(n), &fetches[0], &outs[0], C.int(k), nil, 0, nil, status)
	if err := statusError(status); err != nil {
		return nil, err
	}
	result := make(map[string]*Tensor, k)
	for i, info := range sig.outputList {
		result[info.Key] = fromTF(outs[i])
		C.TF_DeleteTensor(outs[i])
	}
	return result, nil
}

func toTF(t *Tensor) (*C.TF_Tensor, error) {
	var dims *C.int64_t
	var pin runtime.Pinner
	defer pin.Unpin()
	if len(t.Shape) > 0 {
		pin.Pin(&t.Shape[0])
		dims = (*C.int64_t)(unsafe.Pointer(&t.Shape[0]))
	}
	if t.DType == DTString {
		v := C.new_strings(dims, C.int(len(t.Shape)), C.int64_t(len(t.Strings)))
		for i, s := range t.Strings {
			if len(s) > 0 {
				C.set_string(v, C.int64_t(i), (*C.char)(unsafe.Pointer(&s[0])), C.size_t(len(s)))
			}
		}
		return v, nil
	}
	var data unsafe.Pointer
	if len(t.Data) > 0 {
		pin.Pin(&t.Data[0])
		data = unsafe.Pointer(&t.Data[0])
	}
	v := C.new_numeric(C.TF_DataType(t.DType), dims, C.int(len(t.Shape)), data, C.size_t(len(t.Data)))
	if v == nil {
		return nil, invalid("cannot make a %s tensor of shape %v", t.DType, t.Shape)
	}
	return v, nil
}

func fromTF(v *C.TF_Tensor) *Tensor {
	nd := int(C.TF_NumDims(v))
	shape := make([]int64, nd)
	for i := range shape {
		shape[i] = int64(C.TF_Dim(v, C.int(i)))
	}
	t := &Tensor{DType: DType(C.TF_TensorType(v)), Shape: shape}
	if t.DType == DTString {
		n := t.NumElements()
		t.Strings = make([][]byte, n)
		for i := 0; i < n; i++ {
			var size C.size_t
			p := C.string_at(v, C.int64_t(i), &size)
			t.Strings[i] = C.GoBytes(unsafe.Pointer(p), C.int(size))
		}
		return t
	}
	size := int(C.TF_TensorByteSize(v))
	if size > 0 {
		t.Data = C.GoBytes(C.TF_TensorData(v), C.int(size))
	}
	return t
}
