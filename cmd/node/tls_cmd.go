package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-dev/baton/security"
)

const tlsUsage = `usage: baton tls <command> [flags]

commands:
  ca create     make a development CA: baton-ca.pem and baton-ca-key.pem
  cert create   sign a certificate for a master, a region server or a
                client with that CA: <role>-<id>.pem and <role>-<id>-key.pem

Every file is written with 0600 permissions, and none is overwritten
without --force. The certificate names its holder in a URI SAN,
baton://<role>/<id>, which decides what it may do in the cluster.

Run 'baton tls <command> <sub> -h' for its flags.
`

func init() {
	topLevel.add(topCommand{
		name: "tls", rank: 150, run: (*cli).tls,
		summary: `ca create, cert create --role master|regionserver|client --id ID:
a development CA and certificates for --tls-ca/--tls-cert/--tls-key`,
	})
}

func (c *cli) tls(args []string) int {
	return c.subcommands("tls", tlsUsage, args, map[string]func([]string) int{
		"ca":   c.tlsCA,
		"cert": c.tlsCert,
	})
}

func (c *cli) tlsCA(args []string) int {
	return c.subcommands("tls ca", "usage: baton tls ca create [flags]\n", args, map[string]func([]string) int{
		"create": c.tlsCACreate,
	})
}

func (c *cli) tlsCert(args []string) int {
	return c.subcommands("tls cert", "usage: baton tls cert create --role R --id ID [flags]\n", args, map[string]func([]string) int{
		"create": c.tlsCertCreate,
	})
}

// tlsFileDoc is the --json output of both create commands.
type tlsFileDoc struct {
	Identity string `json:"identity,omitempty"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
	NotAfter string `json:"not_after"`
}

func (c *cli) tlsCACreate(args []string) int {
	fs := flag.NewFlagSet("baton tls ca create", flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	dir := fs.String("dir", ".", "directory to write baton-ca.pem and baton-ca-key.pem into")
	days := fs.Int("days", 5*365, "days the CA is valid")
	name := fs.String("name", "Baton development CA", "the CA's common name")
	force := fs.Bool("force", false, "replace existing files")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	if err := parseArgs(fs, args); err != nil {
		return c.flagsFailed("tls ca create", err)
	}
	if *days <= 0 || *days > 100*365 {
		return c.flagsFailed("tls ca create", usagef("--days %d: want 1 to %d", *days, 100*365))
	}
	ca, key, err := security.NewCA(*name, time.Now(), time.Duration(*days)*24*time.Hour)
	if err != nil {
		fmt.Fprintf(c.stderr, "baton tls ca create: %v\n", err)
		return exitFailed
	}
	doc := tlsFileDoc{CertFile: filepath.Join(*dir, "baton-ca.pem"), KeyFile: filepath.Join(*dir, "baton-ca-key.pem"),
		NotAfter: ca.Cert.NotAfter.UTC().Format(time.RFC3339)}
	if err := security.WriteFiles(*force, map[string][]byte{doc.CertFile: ca.PEM, doc.KeyFile: key}); err != nil {
		fmt.Fprintf(c.stderr, "baton tls ca create: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		c.printJSON(doc)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "CA certificate %s (give it to every party as --tls-ca)\nCA key %s (keep it off the cluster's machines)\nvalid until %s\n",
		doc.CertFile, doc.KeyFile, doc.NotAfter)
	return exitOK
}

func (c *cli) tlsCertCreate(args []string) int {
	fs := flag.NewFlagSet("baton tls cert create", flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	role := fs.String("role", "", "master, regionserver or client (required)")
	id := fs.String("id", "", "the holder's id: a master's or region server's node id, a client's name (required)")
	caFile := fs.String("ca", "", "the CA certificate (default: baton-ca.pem in --dir, where 'baton tls ca create --dir' put it)")
	caKey := fs.String("ca-key", "", "the CA key (default: baton-ca-key.pem in --dir)")
	hosts := fs.String("host", "", "DNS names and IP addresses the holder serves on, comma-separated (masters and region servers also get localhost and 127.0.0.1)")
	dir := fs.String("dir", ".", "directory to write the certificate and key into")
	days := fs.Int("days", 365, "days the certificate is valid (at most the CA's remaining life)")
	force := fs.Bool("force", false, "replace existing files")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	if err := parseArgs(fs, args); err != nil {
		return c.flagsFailed("tls cert create", err)
	}
	ident := security.Identity{Role: security.Role(*role), ID: *id}
	if *role == "" || *id == "" {
		return c.flagsFailed("tls cert create", usagef("--role and --id are required"))
	}
	if err := ident.Validate(); err != nil {
		return c.flagsFailed("tls cert create", usagef("%v", strings.TrimPrefix(err.Error(), "security: ")))
	}
	if *days <= 0 || *days > 100*365 {
		return c.flagsFailed("tls cert create", usagef("--days %d: want 1 to %d", *days, 100*365))
	}
	if *caFile == "" {
		*caFile = filepath.Join(*dir, "baton-ca.pem")
	}
	if *caKey == "" {
		*caKey = filepath.Join(*dir, "baton-ca-key.pem")
	}
	ca, err := security.LoadCA(*caFile, *caKey)
	if err != nil {
		fmt.Fprintf(c.stderr, "baton tls cert create: %v\n(make a CA with 'baton tls ca create', or name yours with --ca and --ca-key)\n", err)
		return exitFailed
	}
	var hostList []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	if ident.Role != security.RoleClient {
		hostList = append(hostList, "localhost", "127.0.0.1")
	}
	now := time.Now()
	if !ca.Cert.NotAfter.After(now) {
		fmt.Fprintf(c.stderr, "baton tls cert create: the CA %s expired on %s: make a new one ('baton tls ca create')\n", *caFile, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
		return exitFailed
	}
	notAfter := now.Add(time.Duration(*days) * 24 * time.Hour)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	cert, key, err := ca.Sign(security.CertRequest{Identity: ident, Hosts: hostList, NotBefore: now.Add(-time.Minute), NotAfter: notAfter})
	if err != nil {
		fmt.Fprintf(c.stderr, "baton tls cert create: %v\n", err)
		return exitFailed
	}
	base := filepath.Join(*dir, fmt.Sprintf("%s-%s", ident.Role, ident.ID))
	doc := tlsFileDoc{Identity: ident.String(), CertFile: base + ".pem", KeyFile: base + "-key.pem", NotAfter: notAfter.UTC().Format(time.RFC3339)}
	if err := security.WriteFiles(*force, map[string][]byte{doc.CertFile: cert, doc.KeyFile: key}); err != nil {
		fmt.Fprintf(c.stderr, "baton tls cert create: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		c.printJSON(doc)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%s: certificate %s, key %s, valid until %s\n", doc.Identity, doc.CertFile, doc.KeyFile, doc.NotAfter)
	return exitOK
}

// parseArgs parses a command that takes flags only.
func parseArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q: this command takes flags only", pos[0])
	}
	return nil
}
