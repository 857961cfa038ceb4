package admin

import (
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/raftfsm"
)

// AuditExport configures the export of the audit trail to a file
// (access.Export): every master writes each record it applies, once
// final, as one JSON line.
type AuditExport = access.Export

// Defaults of AuditExport.
const (
	DefaultAuditFileMaxBytes = access.DefaultExportMaxBytes
	DefaultAuditFileKeep     = access.DefaultExportKeep
)

// domainObserver is a backend that tells of domain writes as they are
// applied.
type domainObserver interface {
	ObserveDomain(o *raftfsm.PutObserver) (stop func())
}

// newAuditExporter is s's export of its trail to the file cfg names.
func newAuditExporter(s *Server, cfg AuditExport) (*access.Exporter, error) {
	x := access.ExporterConfig{Node: s.b.ID(), Clock: s.acc.Clock, Stop: s.stopCh, Loops: &s.loops, Log: s.log, Metrics: s.acc.Metrics}
	if ob, ok := s.b.(domainObserver); ok {
		x.Observe = ob.ObserveDomain
	}
	if sc, ok := s.b.(auditScanner); ok {
		x.Scan = auditPages{sc}
	}
	return access.NewExporter(cfg, x)
}
