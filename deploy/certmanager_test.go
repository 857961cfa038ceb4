package deploy

// cert-manager's Go types pull in much of Kubernetes' controller machinery;
// these mirror the fields of its cert-manager.io/v1 Issuer and Certificate
// (github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1) that the
// chart uses, with their JSON names, so that strict decoding catches a
// misspelt or misplaced field as the CRD's schema would. A field the chart
// starts using must be added here, spelt as cert-manager's API spells it.

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Issuer mirrors cert-manager.io/v1 Issuer.
type Issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              IssuerSpec `json:"spec"`
}

// IssuerSpec mirrors IssuerConfig's self-signed and CA issuers.
type IssuerSpec struct {
	SelfSigned *SelfSignedIssuer `json:"selfSigned,omitempty"`
	CA         *CAIssuer         `json:"ca,omitempty"`
}

// SelfSignedIssuer mirrors SelfSignedIssuer.
type SelfSignedIssuer struct {
	CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
}

// CAIssuer mirrors CAIssuer.
type CAIssuer struct {
	SecretName string `json:"secretName"`
}

// Certificate mirrors cert-manager.io/v1 Certificate.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec mirrors the CertificateSpec fields the chart sets.
type CertificateSpec struct {
	SecretName  string                 `json:"secretName"`
	CommonName  string                 `json:"commonName,omitempty"`
	DNSNames    []string               `json:"dnsNames,omitempty"`
	URIs        []string               `json:"uris,omitempty"`
	IPAddresses []string               `json:"ipAddresses,omitempty"`
	IsCA        bool                   `json:"isCA,omitempty"`
	Usages      []string               `json:"usages,omitempty"`
	Duration    *metav1.Duration       `json:"duration,omitempty"`
	RenewBefore *metav1.Duration       `json:"renewBefore,omitempty"`
	PrivateKey  *CertificatePrivateKey `json:"privateKey,omitempty"`
	IssuerRef   ObjectReference        `json:"issuerRef"`
}

// CertificatePrivateKey mirrors CertificatePrivateKey.
type CertificatePrivateKey struct {
	RotationPolicy string `json:"rotationPolicy,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
}

// ObjectReference mirrors cert-manager's meta/v1 ObjectReference (issuerRef).
type ObjectReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// certUsages are cert-manager's KeyUsage names the chart may use.
var certUsages = []string{"digital signature", "key encipherment", "server auth", "client auth", "cert sign"}
