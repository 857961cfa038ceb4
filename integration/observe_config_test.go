package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/security"
)

// TestPrometheusConfig: docker/prometheus.yml is a valid Prometheus
// configuration (promtool check config) whose targets are the compose
// services' HTTP ports: the masters' --http-addr and the region servers'.
func TestPrometheusConfig(t *testing.T) {
	path := filepath.Join("..", "docker", "prometheus.yml")
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool is not installed: only the targets are checked (apt-get install prometheus)")
	} else {
		// promtool opens the TLS files the configuration names, mounted
		// at /tls in the container: check a copy naming real ones.
		checked := filepath.Join(t.TempDir(), "prometheus.yml")
		if err := os.WriteFile(checked, []byte(strings.ReplaceAll(string(conf), "/tls/", tlsFilesFor(t)+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "config", checked).CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s (its TLS files made here): %v\n%s", path, err, out)
		}
	}
	compose, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	targets := regexp.MustCompile(`"((?:master|rs)\d):(\d+)"`).FindAllStringSubmatch(string(conf), -1)
	if len(targets) != 6 {
		t.Fatalf("%d targets in %s, want 3 masters and 3 region servers", len(targets), path)
	}
	for _, tg := range targets {
		service, port := tg[1], tg[2]
		// The service's command line binds its HTTP port on that port.
		line := regexp.MustCompile(`(?m)^  ` + service + `:\n(?:    .*\n)*?    command: \[.*\n(?:  +.*\n)*`).FindString(string(compose))
		if !strings.Contains(line, `--http-addr, "0.0.0.0:`+port+`"`) {
			t.Errorf("target %s:%s: service %s does not serve HTTP on port %s in docker-compose.yml", service, port, service, port)
		}
	}
}

// TestGrafanaDashboard: the dashboard is JSON Grafana can load, with a
// query in every panel, and the compose profile provisions that file.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docker", "grafana", "baton-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 30 {
		t.Fatalf("uid %q, %d panels: not the dashboard", dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || slices.ContainsFunc(p.Targets, func(tg struct {
			Expr string `json:"expr"`
		}) bool {
			return !strings.Contains(tg.Expr, "baton_")
		}) {
			t.Errorf("panel %q has a query that reads no baton_ metric", p.Title)
		}
	}
	compose, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "./docker/grafana/baton-dashboard.json:/var/lib/grafana/dashboards/") {
		t.Error("docker-compose.yml does not mount the dashboard into Grafana")
	}
}

// TestComposeConfig: docker-compose.yml is valid Compose: three masters and
// three region servers by default, prometheus and grafana only under the
// "observe" profile, and the StatefulSet-named masters and region servers
// only under "statefulset" (baton-master-3, the scale-up, under
// "statefulset-scaleup").
// Needs `docker compose` or docker-compose (no engine: config only parses).
func TestComposeConfig(t *testing.T) {
	var compose []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		compose = []string{"docker", "compose"}
	} else if p, err := exec.LookPath("docker-compose"); err == nil {
		compose = []string{p}
	} else {
		t.Skip("skipped: neither `docker compose` nor docker-compose is installed")
	}
	// A copy, with the build context (bin/, made by `make build`) present:
	// docker-compose 1.x checks that it exists.
	dir := t.TempDir()
	for _, f := range []string{"docker-compose.yml", "docker/prometheus.yml", "docker/grafana/baton-dashboard.json",
		"docker/grafana/provisioning/datasources/prometheus.yml", "docker/grafana/provisioning/dashboards/baton.yml", "docker/Dockerfile"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(compose[0], append(compose[1:], "config")...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(compose, " "), err, out)
	}
	// The normalized file, service by service (`config --services` of
	// docker-compose 1.x lists profiled services too, so read the profiles:
	// a block list under the service's "profiles:" key, its items at the
	// key's indent (1.x) or deeper (Compose v2)).
	profiles := map[string]string{}
	var service string
	inServices, inProfiles := false, false
	for _, line := range strings.Split(string(out), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		trimmed := strings.TrimSpace(line)
		if inProfiles && (line == "" || indent < 4 || (indent == 4 && !strings.HasPrefix(trimmed, "- "))) {
			inProfiles = false
		}
		switch {
		case line == "services:":
			inServices = true
		case indent == 0 && line != "":
			inServices = false
		case inServices && indent == 2 && strings.HasSuffix(line, ":"):
			service = strings.TrimSuffix(trimmed, ":")
			profiles[service] = ""
		case inServices && service != "" && indent == 4 && trimmed == "profiles:":
			inProfiles = true
		case inProfiles && strings.HasPrefix(trimmed, "- "):
			if profiles[service] != "" {
				profiles[service] += ","
			}
			profiles[service] += strings.TrimPrefix(trimmed, "- ")
		}
	}
	// The default services (no profile), the observe profile's, and the
	// statefulset profiles' (the Kubernetes StatefulSet's naming, run in
	// Compose): each service with its profile, and no other service.
	want := map[string]string{
		"master1": "", "master2": "", "master3": "", "rs1": "", "rs2": "", "rs3": "",
		"prometheus": "observe", "grafana": "observe",
		"baton-master-0": "statefulset", "baton-master-1": "statefulset", "baton-master-2": "statefulset",
		"baton-rs-0": "statefulset", "baton-rs-1": "statefulset", "baton-rs-2": "statefulset", "baton-master-3": "statefulset-scaleup",
	}
	for s, w := range want {
		p, ok := profiles[s]
		switch {
		case !ok:
			t.Errorf("service %s missing (want profile %q)", s, w)
		case p != w:
			t.Errorf("service %s has profile %q, want %q", s, p, w)
		}
	}
	for s, p := range profiles {
		if _, ok := want[s]; !ok {
			t.Errorf("unexpected service %s (profile %q)", s, p)
		}
	}
	if t.Failed() {
		t.Logf("%s config:\n%s", strings.Join(compose, " "), out)
	}
}

// tlsFilesFor makes the files the Prometheus container finds at /tls (the
// CA's certificate, and its own client certificate and key, under the
// names docker-compose.yml mounts them at) in a directory, and returns it.
func tlsFilesFor(t *testing.T) string {
	t.Helper()
	f := issueFrom(t, newPKI(t), security.Identity{Role: security.RoleClient, ID: "prometheus"}, time.Hour)
	dir := filepath.Join(t.TempDir(), "tls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{f.CA: "ca.pem", f.Cert: "cert.pem", f.Key: "key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
