package rspb

// Label names k the way both ends' metrics and spans do: "open", "close",
// or "unknown". It lives beside the wire type because the dispatcher and
// the region server share a floor and may not import each other.
func (k OpKind) Label() string {
	switch k {
	case OpKind_OP_KIND_OPEN:
		return "open"
	case OpKind_OP_KIND_CLOSE:
		return "close"
	}
	return "unknown"
}
