package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
)

// TestRegionsPagesArePaged: the regions page shows one page of the
// masters' list, filtered by them, with links forward and back; the
// tables page shows counts; a region's repair page finds the region
// without listing its table.
func TestRegionsPagesArePaged(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1, HTTP: true})
	const n = 2500
	names := c.SeedTable("default:big", domain.TableEnabled, n, 5, func(i int) domain.Region {
		return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("x%d", i%10)}
	})
	base := "http://" + c.Leader().HTTPAddr()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	rowRe := regexp.MustCompile(`class="region" data-name="([^"]+)"`)
	rows := func(body string) []string {
		var out []string
		for _, m := range rowRe.FindAllStringSubmatch(body, -1) {
			out = append(out, html.UnescapeString(m[1]))
		}
		return out
	}
	link := func(body, class string) string {
		m := regexp.MustCompile(`<a href="([^"]+)" class="` + class + `"`).FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return html.UnescapeString(m[1])
	}

	// Forward through every page, then back.
	var seen []string
	var pages []string
	path := "/ui/regions?table=default%3Abig"
	for path != "" {
		body := get(path)
		pages = append(pages, path)
		seen = append(seen, rows(body)...)
		if len(rows(body)) > catalog.DefaultRegionPageSize {
			t.Fatalf("%s: %d rows", path, len(rows(body)))
		}
		if len(pages) > 1 && link(body, "prev-page") != pages[len(pages)-2] {
			t.Fatalf("%s: previous is %q, want %q", path, link(body, "prev-page"), pages[len(pages)-2])
		}
		path = link(body, "next-page")
	}
	if len(pages) != 3 || strings.Join(seen, " ") != strings.Join(names, " ") {
		t.Fatalf("%d pages, %d regions listed of %d", len(pages), len(seen), n)
	}

	// Filtered by the masters: a server and a state.
	var onX3 []string
	for i, name := range names {
		if i%10 == 3 {
			onX3 = append(onX3, name)
		}
	}
	if got := rows(get("/ui/regions?server=x3&state=open")); strings.Join(got, " ") != strings.Join(onX3, " ") {
		t.Fatalf("server x3: %d regions, want %d", len(got), len(onX3))
	}

	if body := get("/ui/tables"); !strings.Contains(body, `data-name="default:big"`) || !strings.Contains(body, fmt.Sprintf("<td>%d</td>", n)) {
		t.Fatalf("tables page:\n%s", body)
	}
	// The last region, found from just before its name.
	if body := get("/ui/regions/" + names[n-1] + "/unassign"); !strings.Contains(body, names[n-1]) || !strings.Contains(body, "OPEN") {
		t.Fatalf("unassign page of %s:\n%.2000s", names[n-1], body)
	}
}
