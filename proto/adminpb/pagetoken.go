package adminpb

import (
	"encoding/base64"
	"strings"
)

// Page tokens of the paged lists (ListRegions, ListTables, ListServers)
// are opaque to clients: the kind of list and the last key of the previous
// page, base64url-encoded. The kind makes a token of one list passed to
// another a bad token rather than a silent jump. They live beside the wire
// types because both ends need them: the masters, and clients that start
// a list at a known key (RegionsAfter).
const (
	RegionPageToken = "region"
	TablePageToken  = "table"
	ServerPageToken = "server"
	// NamespacePageToken and LockPageToken: ListNamespaces and ListLocks.
	NamespacePageToken = "namespace"
	LockPageToken      = "lock"
	// ServerRegionsPageToken and AclPageToken: ServerRegions and AclList.
	ServerRegionsPageToken = "server-regions"
	AclPageToken           = "acl"
)

// EncodePageToken is the token of a page of kind that resumes strictly
// after key last ("" for none: the list is done).
func EncodePageToken(kind, last string) string {
	if last == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "/" + last))
}

// DecodePageToken returns the key a page of kind resumes after; ok is false
// for a token that is not one of kind's.
func DecodePageToken(kind, tok string) (last string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	last, ok = strings.CutPrefix(string(b), kind+"/")
	return last, ok && last != ""
}

// RegionsAfter is the page token of a region list that starts strictly
// after name (which need not exist): a list starting at a given region.
func RegionsAfter(name string) string { return EncodePageToken(RegionPageToken, name) }
