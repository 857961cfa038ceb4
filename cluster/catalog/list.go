package catalog

// Lists are paged so that no answer grows with the cluster. A page resumes
// strictly after the key its query names (the last item of the previous
// page), so pages stay stable under concurrent writes: an item deleted
// between two pages is simply not returned, and one created behind the
// resume point is not seen by this walk.

// Page sizes: the default of a query that names none, and the most one
// page may hold (a larger ask is clamped to it).
const (
	DefaultRegionPageSize = 1000
	MaxRegionPageSize     = 10000
	DefaultTablePageSize  = 100
	MaxTablePageSize      = 1000
	DefaultServerPageSize = 1000
	MaxServerPageSize     = 10000
	// DescribeRegions is how many regions DescribeTable returns; the
	// rest are paged with a RegionQuery.
	DescribeRegions = 1000
	// ScanBudget bounds the records one filtered call examines. A filter
	// matching few of many records (the regions of one server among a
	// million) would otherwise scan them all in one call: it returns a
	// short (even empty) page with a resume point instead, and the caller
	// pages on. So every call's cost is bounded, not only its answer.
	ScanBudget = 50000
	// CountBudget bounds the regions one table list counts: the page
	// ends after the table whose count passes it (a table's counts are
	// always whole). Counting reads three fields of a record, a few
	// times cheaper than listing it, hence a larger budget.
	CountBudget = 500000
)

// RegionQuery asks for one page of regions, in name order.
type RegionQuery struct {
	// Table ("ns:name", or "name" in the default namespace) restricts
	// the page to one table's regions; every table's when empty.
	Table string
	// States keeps the regions in one of them; any state when empty.
	States []string
	// Server keeps the regions recorded on that region server id.
	Server string
	// PageSize is the most regions returned (the default when 0).
	PageSize int
	// After is the region name the previous page ended at ("" for the
	// first page): the page starts strictly after it.
	After string
}

// RegionPage is one page of regions. Next is where the next page resumes
// (a RegionQuery's After), "" once the list is done; a page may be short,
// even empty, with a Next when the scan budget ran out first.
type RegionPage struct {
	Regions []Region
	Next    string
}

// TableQuery asks for one page of tables, in name order.
type TableQuery struct {
	// Namespace restricts the page to one namespace (an unknown one has
	// no tables); every namespace when empty.
	Namespace string
	States    []string
	PageSize  int
	// After is the full name ("ns:name") the previous page ended at.
	After string
}

// TablePage is one page of tables, with counts but no regions.
type TablePage struct {
	Tables []Table
	Next   string
}

// ServerQuery asks for one page of region servers, in id order.
type ServerQuery struct {
	PageSize int
	After    string
}

// ServerPage is one page of region servers.
type ServerPage struct {
	Servers []Server
	Next    string
}
