package zookeeper

import (
	"encoding/json"
)

// A lock node's data describes its holder for Inspect and ForceRelease on
// any client: {"v":1,"owner":…,"metadata":…,"holds":n}. The node is
// created with holds 1; the holding driver rewrites it whenever its nested
// hold count changes (publishHolds), so holds is the count as last
// published. Data in any other form (a node written by an older version of
// this package, which stored the bare owner id) reads as that owner with
// one hold.
type nodeData struct {
	V        int    `json:"v"`
	Owner    string `json:"owner"`
	Metadata string `json:"metadata,omitempty"`
	Holds    int    `json:"holds"`
}

// nodeDataVersion is the format version written in "v".
const nodeDataVersion = 1

// encodeNode is the data of a lock node of owner, with metadata, holding
// holds nested holds.
func encodeNode(owner, metadata string, holds int) []byte {
	b, _ := json.Marshal(nodeData{V: nodeDataVersion, Owner: owner, Metadata: metadata, Holds: holds})
	return b
}

// decodeNode reads a lock node's data (see nodeData).
func decodeNode(b []byte) nodeData {
	var nd nodeData
	if err := json.Unmarshal(b, &nd); err == nil && nd.V == nodeDataVersion && nd.Holds >= 1 {
		return nd
	}
	return nodeData{V: nodeDataVersion, Owner: string(b), Holds: 1}
}
