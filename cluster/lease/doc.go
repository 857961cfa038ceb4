// Package lease keeps time-limited leases for region servers and external
// lock holders, with the semantics of HDFS's LeaseManager.
//
// A holder (a region server, or a client holding a lock procedure) is granted
// a lease and must renew it. Between renewals it may own entities (regions,
// lock names): each entity belongs to at most one lease. Three structures, as
// in HDFS:
//
//   - leases by holder (a map), for Renew, Get and State;
//   - all leases ordered by last renewal, oldest first, for the monitor;
//   - leases by entity (a map), for HolderOf.
//
// # Ordering by renewal: an intrusive doubly-linked list
//
// HDFS keeps sortedLeases in a TreeSet (O(log n) per renew). Here the order is
// a doubly-linked list instead: a renewal stamps the lease with the clock's
// current time, which is never earlier than any stamp already in the list, so
// the lease moves to the newest end in O(1) and the list stays sorted without
// comparisons. The clock is read under the manager's lock so concurrent
// renewals cannot append out of order. For a clock that steps backwards
// anyway, insertion walks back from the newest end to the right place: O(1)
// in the normal case, and the list is sorted whatever the clock does, which
// the monitor's "stop at the first live lease" relies on. Ties keep the order
// in which the leases were stamped.
//
// # States
//
// State is a function of time, computed at query time from the last renewal:
// Live, then Suspect once the soft limit has passed (callers assign nothing
// new to a suspect holder), then Expired once the hard limit has passed. Both
// limits are strict, as in HDFS: exactly SoftLimit after a renewal the holder
// is still live.
//
// A lease past its hard limit is expired even before the monitor has removed
// it, so the outcome never depends on when the monitor happened to run: Renew
// and AddEntity fail with ErrExpired, Release does not release it (it returns
// false and the expiry is still reported), and Grant starts a new lease for
// the holder while the old one is still reported as expired. Nothing past its
// hard limit is ever silently revived, except by GraceAll.
//
// # The monitor
//
// Every MonitorInterval the monitor runs one pass (CheckNow): under the lock
// it walks from the oldest lease and removes each one past the hard limit,
// stopping at the first that is not (every later one is newer). The pass
// reads the clock after each removal and stops once MaxPassTime has gone by,
// so a wave of thousands of expiries does not hold the lock against renewals;
// the rest waits for the next pass. At least one lease is removed per pass,
// so progress is guaranteed. The removed leases are then reported to OnExpire
// outside the lock, oldest first. Passes are serialized, so OnExpire is never
// called concurrently with itself and reports across passes stay in order.
//
// # Defaults
//
// HDFS: soft limit 60 s, hard limit 60 min, monitor every 2 s, at most 25 ms
// under the lock per pass. A region server is not a file writer: the hard
// limit is how long its regions stay unavailable after it dies, so Baton uses
// soft 6 s, hard 15 s, monitor every 500 ms and 50 ms per pass (see
// DefaultConfig).
//
// # Leadership
//
// Only grants and expiries are replicated through Raft; renewals are not. A
// new leader therefore fills a manager from the replicated grants and calls
// GraceAll, which gives every holder a fresh renewal time, so nothing expires
// before a full hard limit has passed under the new leader (HDFS renews all
// leases when a NameNode becomes active, for the same reason).
package lease
