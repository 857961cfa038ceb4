// Package access is the master's access control and audit trail: who a
// caller is and what it may call (the admin service's rules, read from
// admin.proto's options), the bindings, tokens and revocations that say
// so, and the record of every call that changes state, refusals included.
//
// It owns their keys in the replicated domain state and the formats of
// their values, which are on-disk formats under the 0.1.0 compatibility
// promise: the ACL's JSON records under acl/, the audit trail's
// adminpb.AuditRecord under audit/ and audit-refused/. The admin API
// (cluster/admin) serves the calls and wires the interceptors; it reads
// and writes these keys only through this package.
package access
