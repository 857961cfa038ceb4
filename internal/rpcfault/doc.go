// Package rpcfault injects message faults into gRPC calls made in process,
// for tests that must show what a lost, late or repeated message does to a
// protocol. Killing a process tests one kind of failure; a network that
// loses the answer of a call whose effect already happened tests another,
// and that is where protocols break: the caller does not know whether its
// request was acted upon.
//
// An Injector holds rules. Install it on a gRPC server (ServerOptions, or
// UnaryServerInterceptor in a chain) or on a client connection (DialOption,
// UnaryClientInterceptor): the faults are the same on either side, seen
// from the caller. A rule names the methods it applies to (full names,
// "/pkg.Service/Method", or a service prefix "/pkg.Service/"), optionally
// a predicate on the request (When) or on the answer (WhenAnswer), a fault,
// and how often it fires:
//
//   - DropAnswer: the handler runs, its answer is replaced by an error
//     (UNAVAILABLE by default), at once or after a delay (the loss noticed
//     by a timeout). The effect happened; the caller cannot know.
//   - DropRequest: the handler does not run; the caller gets the error.
//   - DelayAnswer: the handler runs, its answer is held back for a while.
//   - DelayRequest: the request is held back before the handler runs.
//   - Duplicate: the handler runs twice, one after the other, and the
//     caller gets the second answer: the request was delivered twice, as
//     when an answer is lost and the call is retried at once.
//
// A rule fires with its Probability on every call it matches (zero means
// always), at most Times times (zero means no limit). "Drop the next answer
// of /pkg.S/M whose answer says X" is
//
//	Rule{Methods: []string{"/pkg.S/M"}, Fault: DropAnswer, Times: 1,
//		WhenAnswer: func(c Call, resp any, err error) bool { ... }}
//
// and Handle.Done tells when it has fired. At most one fault applies to a
// call: the first rule, in the order they were added, that fires. Rules
// with WhenAnswer are decided after the handler ran, so only when no rule
// decided before it fired.
//
// Randomness comes from one seeded generator per rule (derived from
// Config.Seed and the rule's position), so a seed fixes the sequence of
// each rule's draws; which concurrent call gets which draw still depends
// on scheduling, so a replay with the same seed reproduces the fault mix
// rather than the exact history. The seed is logged at New and returned by
// Seed: print it in a failing test.
//
// Every fault injected is counted (per rule: Handle.Fired, Counts; per
// fault: Injector.Count) and kept in a bounded history (Events), so a test
// can assert that the faults it meant to inject did happen, and show them
// when it fails. Pause and Resume switch every rule off and on at once,
// e.g. to let a system converge after a chaos phase.
//
// Timers go through internal/clock. Streaming calls see only DropRequest
// and DelayRequest (before the handler); the other faults concern single
// answers and apply to unary calls. An Injector is safe for concurrent use.
package rpcfault
