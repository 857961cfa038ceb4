package security

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"

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

// clusterSecretCreds sends the cluster secret on every call.
type clusterSecretCreds struct{ secret string }

func (c clusterSecretCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{ClusterSecretKey: c.secret}, nil
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
