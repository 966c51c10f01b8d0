package main

import "fmt"

// Code is a TensorFlow (and gRPC) error code.
type Code int

const (
	CodeOK                 Code = 0
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeNotFound           Code = 5
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeUnauthenticated    Code = 16
)

var codeNames = map[Code]string{
	0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
	5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
	9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
	13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "UNKNOWN"
}

// HTTPStatus is TensorFlow Serving's HTTP status for a code.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalidArgument, CodeFailedPrecondition, 11:
		return 400
	case CodeNotFound:
		return 404
	case CodeUnimplemented:
		return 501
	case CodeUnavailable:
		return 503
	case CodeUnauthenticated:
		return 401
	case CodeResourceExhausted:
		return 429
	}
	return 500
}

// MaxMessage is the longest error message sent (its middle cut out past it).
const MaxMessage = 2048

// ServingError is an error in TensorFlow Serving's terms.
type ServingError struct {
	Code    Code
	Message string
	Status  int // an HTTP status of its own (0: the code's)
}

func (e *ServingError) Error() string { return e.Message }

// HTTPStatus is the error's HTTP status.
func (e *ServingError) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.HTTPStatus()
}

func shortened(message string) string {
	if len(message) <= MaxMessage {
		return message
	}
	cut := len(message) - MaxMessage
	half := MaxMessage / 2
	return fmt.Sprintf("%s ... (%d characters left out) ... %s", message[:half], cut, message[len(message)-half:])
}

func newError(code Code, format string, args ...any) *ServingError {
	return &ServingError{Code: code, Message: shortened(fmt.Sprintf(format, args...))}
}

func invalid(format string, args ...any) *ServingError {
	return newError(CodeInvalidArgument, format, args...)
}

// asServing is any error as a ServingError (INTERNAL for one of another kind).
func asServing(err error) *ServingError {
	if se, ok := err.(*ServingError); ok {
		if se.Code == 11 { // OUT_OF_RANGE reads as INVALID_ARGUMENT, as the Python server says
			return &ServingError{Code: CodeInvalidArgument, Message: se.Message}
		}
		return se
	}
	return newError(CodeInternal, "%v", err)
}

func notFound(model string, version *int64) *ServingError {
	if version == nil {
		return newError(CodeNotFound, "Servable not found for request: Latest(%s)", model)
	}
	return newError(CodeNotFound, "Servable not found for request: Specific(%s, %d)", model, *version)
}
