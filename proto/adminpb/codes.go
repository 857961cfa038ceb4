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
	prev := rune(0)
	for _, r := range c.String() {
		// A word starts at an upper-case letter after a lower-case one:
		// "OK" stays one word.
		if unicode.IsUpper(r) && unicode.IsLower(prev) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
		prev = r
	}
	return b.String()
}
