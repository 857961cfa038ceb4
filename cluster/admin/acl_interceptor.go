package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// accessMetrics are the counters of refusals.
type accessMetrics struct {
	denied *prometheus.CounterVec
}

func newAccessMetrics(reg prometheus.Registerer) (*accessMetrics, error) {
	m := &accessMetrics{denied: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_acl_denied_total",
		Help: "Admin calls refused by access control, by method, the permission it needs and the status code answered (PERMISSION_DENIED, UNAUTHENTICATED).",
	}, []string{"method", "needed", "code"})}
	if reg != nil {
		if err := reg.Register(m.denied); err != nil {
			return nil, fmt.Errorf("admin: access metrics: %w", err)
		}
	}
	return m, nil
}

func (m *accessMetrics) deny(method string, err error) {
	need, ok := access.MethodPermission(method)
	label := need.String()
	if !ok {
		label = "master"
	} else if label == "" {
		label = "none"
	}
	m.denied.WithLabelValues(method, label, status.Code(err).String()).Inc()
}

// UnaryInterceptor enforces Config.Access on the admin service's unary
// calls and records the audited ones. A server built by Serve has it; one
// registered on a gRPC server of the caller's (RegisterServices) needs it
// in that server's chain, after the identity policy.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx = s.proveRelay(ctx)
		method, ok := strings.CutPrefix(info.FullMethod, security.AdminService)
		if ok {
			if err := s.refuseRemoved(method); err != nil {
				return nil, err
			}
		}
		if !ok || s.cfg.Access == nil {
			return handler(ctx, req)
		}
		p, err := s.resolve(ctx)
		if err == nil {
			ctx = context.WithValue(ctx, principalCtxKey{}, p)
			err = access.Authorize(p, method, s.acc.Enforce)
		}
		admittedCaughtUp := false // charged as a refusal already
		if err != nil {
			// The caller's refusals are charged here, where the call came
			// in, whoever judges it: the leader does not limit what a
			// master forwards.
			limited := s.limitRefusal(ctx, p, method, err)
			if limited == err {
				if resp, judged, jerr := s.leaderJudges(ctx, p, info.FullMethod, method, req, err); judged {
					markRefusalRecorded(ctx) // by the leader, which judged it
					return resp, jerr
				}
				if notHandedOn[method] && s.caughtUp(ctx, p, method, err) {
					// Judged again on a copy of the grants as fresh as
					// the leader's when the call arrived.
					if p, err = s.resolve(ctx); err == nil {
						ctx = context.WithValue(ctx, principalCtxKey{}, p)
						err = access.Authorize(p, method, s.acc.Enforce)
					}
					limited, admittedCaughtUp = err, err == nil
				}
			}
			if err != nil {
				s.accessM.deny(method, err)
				err = limited
			}
		}
		// A master's own calls too (a person holding a master's
		// certificate is still someone): masters' machinery calls only
		// master-only methods, which are not audited.
		audited := access.Audited(method)
		var note *auditNote
		if audited {
			markRefusalRecorded(ctx) // the record below is the call's
			note = &auditNote{}
			ctx = context.WithValue(ctx, auditNoteKey{}, note)
		}
		if !audited {
			if err != nil {
				// Not audited when served (a read, masters' own calls),
				// but a refusal is someone trying what they may not.
				s.recordRefusal(ctx, p, method, req, err)
				return nil, err
			}
			return handler(ctx, req)
		}
		if err == nil && !admittedCaughtUp {
			err = s.limitChange(ctx, method)
		}
		// A call this node serves as the leader is recorded as it
		// starts, while it runs: the answer then waits for the later of
		// the two commits, not for both in turn. Its outcome is written
		// over the record after (not waited for: if the leader dies
		// first, the record says PENDING). A submission's record is
		// written instead in the submission's own entry, final
		// (auditCarry): one commit. Any other is recorded once its
		// outcome is known.
		var begun <-chan error
		var first *adminpb.AuditRecord
		if err == nil && s.b.IsLeader() && !note.isRemote() {
			first = s.auditRecord(ctx, p, method, req, nil, nil)
			if s.carriesAudit(info.FullMethod) {
				// The record as the call's answer would give it: the
				// procedure's id is all the answer adds (NewRecord).
				// Copied and made ready here (Trail.Prepare), not as
				// it is carried: that runs under the Sequencer, which
				// every write of the executor waits for. The carrying
				// adds the id to the copy: the store asks for a
				// write's late mutations at most once
				// (store.LateMutator).
				// The record itself, not a copy (a copy was 4% of
				// what recording a submission cost): it is the
				// carrying's from here on, and only its time, which
				// nothing changes, is read below.
				note.carry = &auditCarry{trail: s.audit, prepared: s.audit.Prepare(first)}
			} else {
				first.Code = access.AuditPending
				note.start = &auditStart{ch: s.audit.Start(first)}
				begun = note.start.ch
			}
		}
		var resp any
		if err == nil {
			resp, err = handler(ctx, req)
		}
		carried, grouped := note.carry.carried(err)
		if r, ok := resp.(*adminpb.SubmitProcedureResponse); ok && carried != nil && err == nil && !note.isRemote() && slices.Equal(carried.GetProcIds(), []uint64{r.GetId()}) {
			return resp, nil // answered as carried, and committed with the submission
		}
		rec := s.auditRecord(ctx, p, method, req, resp, err)
		if note.isRemote() {
			if begun == nil && carried == nil {
				return resp, err // the leader it was forwarded to recorded it
			}
			// Lost the leadership while holding the call, then forwarded
			// it: the new leader records it too.
			rec.Message = access.Cut("forwarded to the new leader, whose record is the call's: "+rec.GetMessage(), access.FieldMax)
		}
		var aerr error
		switch {
		case carried != nil && err == nil:
			// Committed with the submission. An answer other than the
			// one carried (nothing in this server's chain makes one) is
			// written over it, as an outcome is.
			rec.Id, rec.AtUnixMs, rec.CommittedUnixMs = carried.GetId(), carried.GetAtUnixMs(), carried.GetCommittedUnixMs()
			access.SanitizeRecord(rec)
			if !proto.Equal(rec, carried) {
				if grouped {
					// Its group's key holds it with others: the answer is
					// recorded apart, numbered afresh, not over the group.
					rec.Id, rec.CommittedUnixMs = "", 0
				}
				s.audit.Update(rec)
			}
		case begun != nil:
			if aerr = note.start.wait(s.audit); aerr == nil {
				rec.Id, rec.AtUnixMs, rec.CommittedUnixMs = first.GetId(), first.GetAtUnixMs(), first.GetCommittedUnixMs()
				s.audit.Update(rec)
			}
		default:
			// Not carried, or carried in an entry whose outcome is not
			// known (the submission failed): the outcome answered is
			// recorded apart, once. If that entry did commit, both are
			// in the trail, what committed and what was answered.
			if first != nil {
				rec.AtUnixMs = first.GetAtUnixMs()
			}
			aerr = s.audit.Append(ctx, rec)
		}
		if aerr != nil {
			s.log.Error("audit record not committed", "method", method, "principal", p.String(), "code", rec.GetCode(), "error", aerr)
			if err == nil {
				return nil, s.unavailable(fmt.Sprintf("admin: %s was served, but its audit record could not be committed (%v): its outcome is not acknowledged; retry (with the same nonce a submission answers the same procedure)", method, aerr))
			}
		}
		return resp, err
	}
}

// carriesAudit says the calls of method (a full gRPC name) have their
// record carried in the entry of the submission they make, where the
// trail can: SubmitProcedure and the methods the gateway serves, whose
// handlers hand auditMutations to procedure.SubmitOptions.
func (s *Server) carriesAudit(method string) bool {
	if !s.audit.CanCarry() {
		return false
	}
	if method == adminpb.Admin_SubmitProcedure_FullMethodName {
		return true
	}
	_, ok := s.gateway[method]
	return ok
}

// principalStream is a server stream whose context carries the principal.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s principalStream) Context() context.Context { return s.ctx }

// StreamInterceptor enforces Config.Access on the admin service's streams
// and records the audited ones (SnapshotSave) once they end: the master
// that served it records it, a standby that relayed it leaves that to the
// leader.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		method, ok := strings.CutPrefix(info.FullMethod, security.AdminService)
		if ok {
			if err := s.refuseRemoved(method); err != nil {
				return err
			}
		}
		if !ok || s.cfg.Access == nil {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		p, err := s.resolve(ctx)
		if err == nil {
			err = access.Authorize(p, method, s.acc.Enforce)
		}
		charged := false // a refusal charged to the caller's limit
		if err != nil {
			// Charged where the call came in, as a unary refusal is.
			limited := s.limitRefusal(ctx, p, method, err)
			charged = true
			if limited == err && s.caughtUp(ctx, p, method, err) {
				// Judged again on a copy of the grants as fresh as the
				// leader's when the call arrived.
				p, err = s.resolve(ctx)
				if err == nil {
					err = access.Authorize(p, method, s.acc.Enforce)
				}
				limited = err
			}
			if err != nil {
				s.accessM.deny(method, err)
				s.recordRefusal(ctx, p, method, nil, limited)
				return limited
			}
		}
		ctx = context.WithValue(ctx, principalCtxKey{}, p)
		note := &auditNote{}
		ctx = context.WithValue(ctx, auditNoteKey{}, note)
		if !access.Audited(method) {
			return s.leaderRefused(ctx, p, method, note, handler(srv, principalStream{ServerStream: ss, ctx: ctx}))
		}
		if !charged {
			// Admitted after a catch-up, the call was charged as a
			// refusal already: once per call, as a unary call handed to
			// the leader is.
			if err := s.limitChange(ctx, method); err != nil {
				s.recordRefusal(ctx, p, method, nil, err)
				return err
			}
		}
		err = handler(srv, principalStream{ServerStream: ss, ctx: ctx})
		if note.isRemote() {
			return s.leaderRefused(ctx, p, method, note, err)
		}
		rec := s.auditRecord(ctx, p, method, nil, nil, err)
		// A client that went away mid-stream is recorded too.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if aerr := s.audit.Append(actx, rec); aerr != nil {
			// The stream is over: its outcome stands, the record is lost.
			s.log.Error("audit record not committed", "method", method, "principal", p.String(), "code", rec.GetCode(), "error", aerr)
		}
		return err
	}
}

// leaderRefused is the end of a stream this standby relayed to the leader
// (note says whether it did): a refusal of the leader's, which judged the
// stream on its own grants (a revocation this node has not applied) and
// recorded it, is not recorded again here (RefusalStreamInterceptor), and
// is charged to the caller's limit where the call came in.
func (s *Server) leaderRefused(ctx context.Context, p access.Principal, method string, note *auditNote, err error) error {
	if err == nil || !note.isRemote() || !policyRefusal(err) {
		return err
	}
	markRefusalRecorded(ctx)
	return s.limitRefusal(ctx, p, method, err)
}
