package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

func TestParseRegionServerFlags(t *testing.T) {
	base := []string{"--id", "rs1", "--grpc-addr", "10.0.0.5:16020", "--masters", "10.0.0.1:7070,10.0.0.2:7070", "--insecure"}
	masters := []string{"10.0.0.1:7070", "10.0.0.2:7070"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want regionserver.Config
		err  string // substring of the usage error; "" = valid
	}{
		{name: "required only", args: base, want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters}},
		{name: "all flags", args: append(base, "--op-latency", "50ms", "--failure-rate", "0.25", "--heartbeat-interval", "2s"),
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters, OpLatency: 50 * time.Millisecond, FailureRate: 0.25, HeartbeatInterval: 2 * time.Second}},
		{name: "flags after equals", args: []string{"--id=rs1", "--grpc-addr=localhost:1", "--masters=m:1", "--failure-rate=1"},
			want: regionserver.Config{ID: "rs1", GRPCAddr: "localhost:1", Masters: []string{"m:1"}, FailureRate: 1}},
		{name: "all from env", env: map[string]string{"BATON_RS_ID": "rs2", "BATON_RS_GRPC_ADDR": "rs2:16020", "BATON_MASTERS": " m1:7070, m2:7070 ,",
			"BATON_RS_OP_LATENCY": "1s", "BATON_RS_FAILURE_RATE": "0", "BATON_RS_HEARTBEAT_INTERVAL": "500ms", "BATON_INSECURE": "1"},
			want: regionserver.Config{ID: "rs2", GRPCAddr: "rs2:16020", Masters: []string{"m1:7070", "m2:7070"}, OpLatency: time.Second, HeartbeatInterval: 500 * time.Millisecond}},
		{name: "flag beats env", env: map[string]string{"BATON_RS_ID": "envid", "BATON_RS_OP_LATENCY": "nonsense"}, args: append(base, "--op-latency", "5ms"),
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters, OpLatency: 5 * time.Millisecond}},
		{name: "missing everything", err: "--id is required\n  --grpc-addr is required\n  --masters is required"},
		{name: "blank masters", args: []string{"--id", "a", "--grpc-addr", "h:1", "--masters", " , "}, err: "--masters is required"},
		{name: "wildcard grpc", args: []string{"--id", "a", "--grpc-addr", "0.0.0.0:1", "--masters", "m:1"}, err: "not a wildcard"},
		{name: "bad master", args: []string{"--id", "a", "--grpc-addr", "h:1", "--masters", "m:1,nope"}, err: `--masters "nope"`},
		{name: "bad latency", args: append(base, "--op-latency", "fast"), err: "--op-latency"},
		{name: "negative latency", args: append(base, "--op-latency", "-1s"), err: "--op-latency"},
		{name: "bad env latency", env: map[string]string{"BATON_RS_OP_LATENCY": "x"}, args: base, err: "--op-latency \"x\""},
		{name: "rate above 1", args: append(base, "--failure-rate", "1.5"), err: "--failure-rate"},
		{name: "rate not a number", args: append(base, "--failure-rate", "often"), err: "--failure-rate"},
		{name: "rate NaN", args: append(base, "--failure-rate", "NaN"), err: "--failure-rate"},
		{name: "bad heartbeat", args: append(base, "--heartbeat-interval", "-5s"), err: "--heartbeat-interval"},
		{name: "HTTP names and connection limits", env: map[string]string{"BATON_RS_MAX_CONNS_PER_SOURCE": "8"},
			args: append(base, "--http-allowed-hosts", "RS1.lan.,scraper", "--handshake-timeout", "3s"),
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters, HTTPAllowedHosts: []string{"rs1.lan", "scraper"},
				ConnLimits: security.ConnLimits{HandshakeTimeout: 3 * time.Second, MaxPerSource: 8}}},
		{name: "bad HTTP name", args: append(base, "--http-allowed-hosts", "a/b"), err: `--http-allowed-hosts: "a/b" is not a host name`},
		{name: "bad handshake timeout", args: append(base, "--handshake-timeout", "forever"), err: `--handshake-timeout "forever"`},
		{name: "positional", args: append(base, "extra"), err: "takes no arguments"},
		{name: "http addr", args: append(base, "--http-addr", "0.0.0.0:16030"),
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters, HTTPAddr: "0.0.0.0:16030"}},
		{name: "http addr from env", env: map[string]string{"BATON_RS_HTTP_ADDR": "rs1:16030"}, args: base,
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: masters, HTTPAddr: "rs1:16030"}},
		{name: "bad http addr", args: append(base, "--http-addr", "nope"), err: "--http-addr"},
		{name: "listen host", args: []string{"--id", "baton-rs-0", "--grpc-addr", "baton-rs-0.baton-rs-headless:7080", "--http-addr", "0.0.0.0:7082", "--masters", "m:1", "--insecure", "--listen-host", "0.0.0.0"},
			want: regionserver.Config{ID: "baton-rs-0", GRPCAddr: "baton-rs-0.baton-rs-headless:7080", ListenAddr: "0.0.0.0:7080", HTTPAddr: "0.0.0.0:7082", Masters: []string{"m:1"}}},
		{name: "listen host from env", env: map[string]string{"BATON_LISTEN_HOST": "10.1.2.3"}, args: base,
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", ListenAddr: "10.1.2.3:16020", Masters: masters}},
		{name: "bad listen host", args: append(base, "--listen-host", "0.0.0.0:7080"), err: `--listen-host "0.0.0.0:7080": want a host name or an IP address`},
		{name: "listen host same ports", args: append(base, "--listen-host", "0.0.0.0", "--http-addr", "127.0.0.1:16020"), err: "--grpc-addr and --http-addr both have port 16020"},
		{name: "listen host plaintext", args: []string{"--id", "rs1", "--grpc-addr", "127.0.0.1:1", "--masters", "m:1", "--listen-host", "0.0.0.0"}, err: "--listen-host 0.0.0.0:1: not loopback"},
		{name: "plaintext beyond loopback", args: []string{"--id", "rs1", "--grpc-addr", "10.0.0.5:1", "--masters", "m:1", "--http-addr", "127.0.0.1:2"},
			err: "--grpc-addr 10.0.0.5:1: not loopback"},
		{name: "partial TLS", args: []string{"--id", "rs1", "--grpc-addr", "127.0.0.1:1", "--masters", "m:1", "--tls-ca", "ca.pem"}, err: "given ca.pem (from --tls-ca); missing --tls-cert (or env BATON_RS_TLS_CERT), --tls-key (or env BATON_RS_TLS_KEY)"},
		{name: "bad BATON_INSECURE", env: map[string]string{"BATON_INSECURE": "sure"}, args: []string{"--id", "rs1", "--grpc-addr", "127.0.0.1:1", "--masters", "m:1"}, err: "BATON_INSECURE"},
		{name: "TLS beyond loopback", args: []string{"--id", "rs1", "--grpc-addr", "10.0.0.5:1", "--masters", "m:1", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: regionserver.Config{ID: "rs1", GRPCAddr: "10.0.0.5:1", Masters: []string{"m:1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := parseRegionServerFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRegionServerExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"regionserver", "--nope"}, 2, "unknown flag --nope"},
		{[]string{"regionserver"}, 2, "--id is required"},
		{[]string{"regionserver", "-h"}, 0, "usage: baton regionserver"},
		{[]string{"regionserver", "--id", "a", "--grpc-addr", "127.0.0.1:1", "--masters", "m:1", "--failure-rate", "2"}, 2, "run 'baton regionserver -h'"},
	} {
		code, stdout, stderr := runCLI(t, nil, tc.args...)
		if tc.code == 0 {
			stderr = stdout // help asked for goes to stdout
		}
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, want %d; stderr %q, want it to contain %q", tc.args, code, tc.code, stderr, tc.stderr)
		}
	}
}

// registrar is a master that accepts every registration and heartbeat.
type registrar struct {
	rspb.UnimplementedMasterServer
	got chan *rspb.RegisterServerRequest
}

func (r *registrar) RegisterServer(_ context.Context, req *rspb.RegisterServerRequest) (*rspb.RegisterServerResponse, error) {
	select {
	case r.got <- req:
	default:
	}
	return &rspb.RegisterServerResponse{StartCode: 7, HeartbeatIntervalMs: 50, Term: 1}, nil
}

func (r *registrar) Heartbeat(context.Context, *rspb.HeartbeatRequest) (*rspb.HeartbeatResponse, error) {
	return &rspb.HeartbeatResponse{Term: 1}, nil
}

// TestRunRegionServer runs the command in-process: it prints where it
// listens, registers with the master under that address, serves
// ListRegions, and exits 0 when interrupted.
func TestRunRegionServer(t *testing.T) {
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{got: make(chan *rspb.RegisterServerRequest, 1)}
	g := grpc.NewServer()
	rspb.RegisterMasterServer(g, reg)
	go func() { _ = g.Serve(mlis) }()
	defer g.Stop()

	rsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rsAddr := rsLis.Addr().String()
	_ = rsLis.Close()

	out, errb, cancel, done := runInBackground(nil, "regionserver", "--id", "rs9", "--grpc-addr", rsAddr, "--masters", mlis.Addr().String(), "--op-latency", "1ms")
	defer cancel()
	select {
	case req := <-reg.got:
		if req.GetServerId() != "rs9" || req.GetAddress() != rsAddr {
			t.Fatalf("registration %v, want rs9 at %s", req, rsAddr)
		}
	case code := <-done:
		t.Fatalf("exited %d before registering; stderr: %s", code, errb.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("no registration; stderr: %s", errb.String())
	}
	// The banner is printed once Start returns, and the registration runs
	// in the background from Start on: either may come first.
	testwait.For(t, 30*time.Second, "the banner with the id and the address on stdout", func() bool {
		s := out.String()
		return strings.Contains(s, `baton region server "rs9" running`) && strings.Contains(s, rsAddr)
	})
	cc, err := grpc.NewClient(rsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The master has answered; the server takes the start code just after.
	testwait.ForNil(t, 10*time.Second, "rs9 serving with start code 7", func() error {
		lr, err := rspb.NewRegionServerClient(cc).ListRegions(context.Background(), &rspb.ListRegionsRequest{})
		if err != nil {
			return err
		}
		if lr.GetServerId() != "rs9" || lr.GetStartCode() != 7 {
			return fmt.Errorf("ListRegions answered %v", lr)
		}
		return nil
	})
	cancel()
	if code := within(t, done, 10*time.Second, "still running after interrupt"); code != exitOK {
		t.Fatalf("exit %d after interrupt; stderr: %s", code, errb.String())
	}
}
