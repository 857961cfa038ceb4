package access

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// Carried records written as groups. A submission's record, carried in
// its entry (Carry), is a key of its own through raft, the log store and
// every master's state: what made a record cost a submission 12-15% of
// its rate, whatever the record held (issue 33). Once the cluster version
// allows it, Carry hands the store a placeholder instead, and the node's
// Sequencer has the trail fold the placeholders of one entry (fold): the
// records are numbered there, in a run for each holder, and each run is
// written as one key, audit/<term>-<first>+<last> (AuditRecordGroup). One
// entry commits the submissions and their records, all or none, as
// before; the quotas count a group's records, and take a group out whole.

// Folding is a State whose proposals of carried records can be folded:
// it sets f as the folder of its node's raftfsm.Sequencer.
type Folding interface {
	SetFolder(f *raftfsm.Folder)
}

// holdPrefix starts the trail's placeholders.
const holdPrefix = raftfsm.PlaceholderPrefix + "audit/"

// grouping says rec, carried, goes into a group: the state folds, the
// cluster version allows groups, and rec is final and served (a PENDING
// record has its outcome written over its own key; a refusal is kept
// apart).
func (l *Trail) grouping(rec *adminpb.AuditRecord) bool {
	return l.folds && !rec.GetRefused() && rec.GetCode() != AuditPending && l.atFormat2()
}

// atFormat2 says the cluster version allows version.Format2.
func (l *Trail) atFormat2() bool {
	if l.format2.Load() {
		return true
	}
	if l.cfg.Format == nil || !l.cfg.Format.Allows(version.Format2) {
		return false
	}
	l.format2.Store(true)
	return true
}

// KeepsRequests says records may keep their call's request in place of
// its args (NewRequestRecord): the cluster version allows it, so every
// member renders them (RenderArgs).
func (l *Trail) KeepsRequests() bool { return l != nil && l.atFormat2() }

// sanitize is SanitizeRecord, and below cluster version 2 RenderArgs: a
// record written then is read by members that render none (a standby's
// AppendAudit, made as the version rose, or forged, or a record made
// before a leader's trail knew the version).
func (l *Trail) sanitize(r *adminpb.AuditRecord) {
	if len(r.GetRequest()) > 0 && !l.KeepsRequests() {
		RenderArgs(r)
	}
	SanitizeRecord(r)
}

// hold keeps p until its entry is folded, and returns its placeholder.
func (l *Trail) hold(p *Prepared) []raftfsm.Mutation {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.carried++
	key := holdPrefix + strconv.FormatUint(l.carried, 10)
	l.carrying[key] = p
	return []raftfsm.Mutation{raftfsm.Put(key, nil)}
}

// fold is the Sequencer's raftfsm.Folder: it numbers the records of one
// entry's placeholders, keys, and writes them as groups, with the prunes
// due.
func (l *Trail) fold(keys []string) ([]raftfsm.Mutation, func(error), error) {
	recs := make([]*Prepared, 0, len(keys))
	l.mu.Lock()
	for _, k := range keys {
		r, ok := l.carrying[k]
		if !ok {
			l.mu.Unlock()
			// A record its write expects to commit with it: the entry
			// must not commit without it.
			return nil, nil, fmt.Errorf("audit: placeholder %q stands for no record", strings.TrimPrefix(k, raftfsm.PlaceholderPrefix))
		}
		recs = append(recs, r)
	}
	// Every placeholder handed out under the Sequencer before this fold
	// is in this entry or in a write that failed before it: those of the
	// latter are for no entry.
	clear(l.carrying)
	l.mu.Unlock()
	// A failure here fails the submissions, which record their calls
	// apart (as a carried record whose entry failed).
	w, err := l.numberGroups(recs)
	if err != nil {
		return nil, nil, err
	}
	return w.all(), func(err error) { l.settle(w, err) }, nil
}

// numberGroups numbers recs, in a run for each holder in the order each
// holder first comes (cut to at most an eighth of a holder's quota), and
// works out the group of each run and the prunes due. Under the
// Sequencer, as number.
func (l *Trail) numberGroups(recs []*Prepared) (*numbered, error) {
	term := l.numberingTerm()
	sp := l.spaces[0]
	var order []string
	runs := map[string][]*Prepared{}
	for _, p := range recs {
		if _, ok := runs[p.holder]; !ok {
			order = append(order, p.holder)
		}
		runs[p.holder] = append(runs[p.holder], p)
	}
	// A group goes whole past its holder's quota, so a group as big as
	// the quota would take every record of its holder with it, itself
	// included: runs are cut at an eighth of the quota, and a holder
	// past it keeps at least seven eighths.
	most := max(1, min(sp.PerHolder, sp.Max)/8)
	var cut [][]*Prepared
	for _, h := range order {
		for run := runs[h]; len(run) > 0; {
			n := min(len(run), most)
			cut, run = append(cut, run[:n]), run[n:]
		}
	}
	now := l.cfg.Clock.Now().UnixMilli()
	w := &numbered{muts: make([]raftfsm.Mutation, 0, len(cut))}
	var added []keyedRecord
	earliest := now
	for _, run := range cut {
		first := l.n + 1
		newest := int64(0)
		for _, p := range run {
			r := p.rec
			l.n++
			r.Id = numberedID(term, l.n)
			if r.GetCommittedUnixMs() == 0 {
				r.CommittedUnixMs = now
			}
			newest = max(newest, r.GetCommittedUnixMs())
			earliest = min(earliest, r.GetCommittedUnixMs())
		}
		v, err := appendGroup(make([]byte, 0, groupSize(run, newest)), run, newest)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		key := AuditPrefix + AuditGroupSuffix(term, first, l.n)
		w.muts = append(w.muts, raftfsm.Put(key, v))
		added = append(added, keyedRecord{key, run[0].rec, len(run)})
		w.fresh += len(run)
	}
	w.prune = l.prunes(sp, w, added, nil, false, earliest)
	return w, nil
}
