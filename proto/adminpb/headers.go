package adminpb

// LeaderHeader is the response header a master sets on a call it forwarded
// to the leader and got answered: the leader's admin address, as the
// leader registered it. A client that was given that address among its own
// may send its next calls there, and save the masters a hop each; one
// that was not (it reaches the masters through other names: published
// ports, a load balancer) keeps calling where it did. Masters of 0.1.0 set
// no such header; clients of 0.1.0 ignore it.
const LeaderHeader = "x-baton-leader"
