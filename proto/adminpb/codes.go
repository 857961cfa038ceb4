package adminpb

import (
	"strings"
	"unicode"

	"google.golang.org/grpc/codes"
)

// CodeName spells a gRPC code as the admin API documents it:
// FAILED_PRECONDITION. It lives beside the wire types because the domain,
// the console and the CLI all answer with it, from floors that may not
// import each other.
func CodeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
