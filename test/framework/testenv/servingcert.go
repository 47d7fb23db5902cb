// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	kubernetesutils "github.com/gardener/gardener/pkg/utils/kubernetes"
	secretsutils "github.com/gardener/gardener/pkg/utils/secrets"
)

// Certificates are a cluster CA and kube-apiserver's serving certificate signed by it.
type Certificates struct {
	// CA is the cluster CA, which a pod finds as ca.crt of its service-account volume.
	CA *secretsutils.Certificate
	// Server is kube-apiserver's serving certificate; its secret data is what kube-apiserver mounts.
	Server *secretsutils.Certificate
}

// NewGardenerCertificates generates the cluster CA and the kube-apiserver serving certificate of a self-hosted shoot
// with Gardener's secret utilities and the SANs Gardener gives it: the DNS names of the kube-apiserver Service in
// kube-system and of the `kubernetes` Service, localhost, 127.0.0.1 and ::1 (RunsAsStaticPod; gardener
// pkg/component/kubernetes/apiserver/secrets.go reconcileSecretServer), plus the technical ID, api.<external domain>,
// the shoot's domain and the `kubernetes` ClusterIPs (pkg/gardenlet/operation/botanist/kubeapiserver.go
// computeKubeAPIServerServerCertificateConfig). No node IP.
func NewGardenerCertificates(technicalID, externalDomain string, clusterIPs ...net.IP) (*Certificates, error) {
	ca, err := (&secretsutils.CertificateSecretConfig{
		Name: v1beta1constants.SecretNameCACluster, CommonName: "kubernetes", CertType: secretsutils.CACert,
	}).GenerateCertificate()
	if err != nil {
		return nil, err
	}
	dnsNames := kubernetesutils.DNSNamesForService(v1beta1constants.DeploymentNameKubeAPIServer, metav1.NamespaceSystem)
	dnsNames = append(dnsNames, "localhost")
	dnsNames = append(dnsNames, kubernetesutils.DNSNamesForService("kubernetes", metav1.NamespaceDefault)...)
	dnsNames = append(dnsNames, technicalID, externalDomain, "api."+externalDomain)
	server, err := (&secretsutils.CertificateSecretConfig{
		Name:                              "kube-apiserver",
		CommonName:                        v1beta1constants.DeploymentNameKubeAPIServer,
		IPAddresses:                       append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}, clusterIPs...),
		DNSNames:                          dnsNames,
		CertType:                          secretsutils.ServerCert,
		SigningCA:                         ca,
		SkipPublishingCACertificate:       true,
		IncludeCACertificateInServerChain: true,
	}).GenerateCertificate()
	if err != nil {
		return nil, err
	}
	return &Certificates{CA: ca, Server: server}, nil
}

// install writes the serving certificate where envtest's kube-apiserver reads it (--cert-dir; envtest generates its
// own only when apiserver.crt is missing), with a service-account signing key, and makes envtest's clients trust the
// cluster CA.
func (c *Certificates) install(apiServer *envtest.APIServer) error {
	data := c.Server.SecretData()
	saKey, err := (&secretsutils.CertificateSecretConfig{Name: "sa", CommonName: "service-accounts", CertType: secretsutils.CACert}).GenerateCertificate()
	if err != nil {
		return err
	}
	for name, content := range map[string][]byte{
		"apiserver.crt": data[secretsutils.DataKeyCertificate],
		"apiserver.key": data[secretsutils.DataKeyPrivateKey],
		"sa-signer.crt": saKey.CertificatePEM,
		"sa-signer.key": saKey.PrivateKeyPEM,
	} {
		if err := os.WriteFile(filepath.Join(apiServer.CertDir, name), content, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	apiServer.SecureServing.CA = c.CA.CertificatePEM
	return nil
}
