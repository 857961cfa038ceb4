package security

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// ClusterSecretKey is the gRPC metadata key by which a master of a
// plaintext cluster proves it is one to another (agent --cluster-secret):
// without TLS there is no certificate to say so, and what a master says of
// a call it passes on (the caller it forwards for, the address the call
// came from, that a standby already counted it against the rate limit) is
// believed only from a master.
const ClusterSecretKey = "x-baton-cluster-secret"

// MinClusterSecretLen is the shortest cluster secret accepted: 16
// characters of a random string are beyond guessing over a network.
const MinClusterSecretLen = 16

// clusterSecretCreds sends the cluster secret on every call, or, with
// only set, on calls to those authorities (host:port) alone.
type clusterSecretCreds struct {
	secret string
	only   map[string]bool
}

func (c clusterSecretCreds) GetRequestMetadata(_ context.Context, uri ...string) (map[string]string, error) {
	if c.only != nil && !c.allowed(uri) {
		return nil, nil
	}
	return map[string]string{ClusterSecretKey: c.secret}, nil
}

// allowed says every uri of the call (scheme://authority/service) names
// an authority of c.only.
func (c clusterSecretCreds) allowed(uris []string) bool {
	if len(uris) == 0 {
		return false
	}
	for _, raw := range uris {
		u, err := url.Parse(raw)
		if err != nil || !c.only[u.Host] {
			return false
		}
	}
	return true
}

// RequireTransportSecurity is false: the secret is for clusters without
// TLS (with TLS a master's certificate proves it).
func (c clusterSecretCreds) RequireTransportSecurity() bool { return false }

// ClusterSecretDialOption sends secret on every call of a master's
// connection to another master. Never give it to a connection to a region
// server or anything else: the secret is what makes a master.
func ClusterSecretDialOption(secret string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(clusterSecretCreds{secret: secret})
}

// ClusterSecretDialOptionTo sends secret only on calls to one of
// authorities (the host:port dialled): for a client that follows leader
// hints, which an attacker can make point anywhere (a console's actions
// client, whose hints come from a standby that may have been told a
// false admin address of the leader).
func ClusterSecretDialOptionTo(secret string, authorities ...string) grpc.DialOption {
	only := make(map[string]bool, len(authorities))
	for _, a := range authorities {
		only[a] = true
	}
	return grpc.WithPerRPCCredentials(clusterSecretCreds{secret: secret, only: only})
}

// ClusterSecretProven says ctx's call carries secret (not empty) as its
// ClusterSecretKey, compared in constant time.
func ClusterSecretProven(ctx context.Context, secret string) bool {
	if secret == "" {
		return false
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	vals := md.Get(ClusterSecretKey)
	if len(vals) != 1 {
		return false
	}
	// Hashed first, so that the comparison takes as long whatever the
	// length of what the caller sent.
	got, want := sha256.Sum256([]byte(vals[0])), sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

var _ credentials.PerRPCCredentials = clusterSecretCreds{}
