// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	secretsmanager "github.com/gardener/gardener/pkg/utils/secrets/manager"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// certificates parses the PEM certificates of a CA bundle.
func certificates(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for block, rest := pem.Decode(bundle); block != nil; block, rest = pem.Decode(rest) {
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, cert)
	}
	return certs
}

// webhookCAs are the CA secrets of the webhook's certificate management (not its bundle).
func webhookCAs(ctx context.Context, t *testing.T) []*corev1.Secret {
	t.Helper()
	secrets := &corev1.SecretList{}
	if err := env.Client.List(ctx, secrets, client.InNamespace(testenv.ExtensionNamespace),
		client.MatchingLabels{secretsmanager.LabelKeyManagedBy: secretsmanager.LabelValueSecretsManager}); err != nil {
		t.Fatal(err)
	}
	var cas []*corev1.Secret
	for i := range secrets.Items {
		name := secrets.Items[i].Labels[secretsmanager.LabelKeyName]
		if strings.HasPrefix(name, "ca-") && !strings.HasSuffix(name, "-bundle") {
			cas = append(cas, &secrets.Items[i])
		}
	}
	return cas
}

// caBundle is the caBundle of the extension's webhooks, which must all carry the same one.
func caBundle(ctx context.Context) ([]byte, error) {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		return nil, err
	}
	for _, wh := range mwc.Webhooks[1:] {
		if string(wh.ClientConfig.CABundle) != string(mwc.Webhooks[0].ClientConfig.CABundle) {
			return nil, fmt.Errorf("webhook %s has another caBundle than %s", wh.Name, mwc.Webhooks[0].Name)
		}
	}
	return mwc.Webhooks[0].ClientConfig.CABundle, nil
}

// servedCertificate is the certificate the webhook server presents now.
func servedCertificate(ctx context.Context) (*x509.Certificate, error) {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		return nil, err
	}
	u, err := url.Parse(*mwc.Webhooks[0].ClientConfig.URL)
	if err != nil {
		return nil, err
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // the test checks the chain itself
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// TestCARotation: when Gardener's certificate management renews the webhook CA (after 80% of its 30 days), the
// caBundle of every webhook carries the old and the new CA, the server keeps its old certificate, still trusted, until
// it loads the one the new CA signed, and admission works at every step. The renewal is brought forward by dating the
// CA secret back, as the passing of 24 days would; the certificate controllers act at start and every five minutes,
// so the extension is restarted for each step instead of waiting.
func TestCARotation(t *testing.T) {
	ctx := context.Background()
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	before, err := caBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldCAs := certificates(t, before)
	if len(oldCAs) != 1 {
		t.Fatalf("%d CAs in the caBundle before the rotation, want 1", len(oldCAs))
	}
	oldCA := oldCAs[0]

	backdateWebhookCA(ctx, t)
	if err := env.Extensions().Restart(ctx, false); err != nil {
		t.Fatal(err)
	}

	// 1. The caBundle gets the new CA beside the old one; the server still presents the old CA's certificate.
	newCA := waitForNewCA(ctx, t, oldCA)
	waitUntilMutating(t, rendered.Agent)
	served, err := servedCertificate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := served.CheckSignatureFrom(oldCA); err != nil {
		t.Logf("the server already presents a certificate of the new CA")
	}

	// 2. Once the server has loaded its new certificate, it is the new CA's, and admission still works.
	if err := env.Extensions().Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		served, err := servedCertificate(ctx)
		if err != nil {
			return false, err
		}
		return served.CheckSignatureFrom(newCA) == nil, fmt.Errorf("the server presents a certificate of %s", served.Issuer)
	}); err != nil {
		t.Fatalf("the server never presented the new CA's certificate: %v", err)
	}
	waitUntilMutating(t, rendered.Agent)
	// The old CA stays beside the new one for a day (IgnoreOldSecretsAfter), so that no server certificate it signed
	// is distrusted before every replica has reloaded.
	if cas := webhookCAs(ctx, t); len(cas) != 2 {
		t.Errorf("%d webhook CA secrets after the rotation, want the new one and the old one kept for the bundle", len(cas))
	}
}

// backdateWebhookCA dates the one webhook CA secret back by 25 of its 30 days, which makes the extension's secrets
// manager renew it.
func backdateWebhookCA(ctx context.Context, t *testing.T) {
	t.Helper()
	cas := webhookCAs(ctx, t)
	if len(cas) != 1 {
		t.Fatalf("%d webhook CA secrets before the rotation, want 1", len(cas))
	}
	ca := cas[0]
	patch := client.MergeFrom(ca.DeepCopy())
	now := time.Now()
	ca.Labels[secretsmanager.LabelKeyIssuedAtTime] = strconv.FormatInt(now.Add(-25*24*time.Hour).Unix(), 10)
	ca.Labels[secretsmanager.LabelKeyValidUntilTime] = strconv.FormatInt(now.Add(5*24*time.Hour).Unix(), 10)
	if err := env.Client.Patch(ctx, ca, patch); err != nil {
		t.Fatal(err)
	}
}

// waitForNewCA waits until the caBundle holds oldCA and a new one, and returns the new one.
func waitForNewCA(ctx context.Context, t *testing.T, oldCA *x509.Certificate) *x509.Certificate {
	t.Helper()
	var newCA *x509.Certificate
	if err := testenv.WaitFor(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		bundle, err := caBundle(ctx)
		if err != nil {
			return false, err
		}
		cas := certificates(t, bundle)
		if len(cas) != 2 {
			return false, fmt.Errorf("%d CAs in the caBundle, want the old and the new", len(cas))
		}
		for _, c := range cas {
			if !c.Equal(oldCA) {
				newCA = c
			}
		}
		if newCA == nil {
			return false, fmt.Errorf("the old CA is gone from the caBundle")
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the caBundle did not follow the CA rotation: %v", err)
	}
	return newCA
}

// TestWebhookConfigurationOfAnOlderVersionIsReplaced: the extension's MutatingWebhookConfiguration as an older version
// might have left it, with a webhook under a name no longer used that calls another path and fails closed, and another
// webhook's timeout changed, is a shape the chart's policy would refuse the extension to write. When the extension
// starts, Gardener's certificate management overwrites the webhooks whole (extensions/pkg/webhook OverwriteWebhooks
// with the desired configuration, in the certificates reconciler at start), which the policy lets through: afterwards
// the configuration holds exactly the extension's webhooks again, and admission works.
func TestWebhookConfigurationOfAnOlderVersionIsReplaced(t *testing.T) {
	ctx := context.Background()
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, w := range mwc.Webhooks {
		want = append(want, w.Name)
	}
	obsolete := mwc.Webhooks[0].DeepCopy()
	obsolete.Name = "cilium-pods.cilium-selfhosted.extensions.gardener.cloud"
	obsolete.FailurePolicy = new(admissionregistrationv1.Fail)
	if obsolete.ClientConfig.URL != nil {
		obsolete.ClientConfig.URL = new(strings.TrimSuffix(*obsolete.ClientConfig.URL, "/"+strings.Split(mwc.Webhooks[0].Name, ".")[0]) + "/cilium-pods")
	}
	mwc.Webhooks = append(mwc.Webhooks, *obsolete)
	mwc.Webhooks[1].TimeoutSeconds = new(int32(10))
	if err := env.Client.Update(ctx, mwc); err != nil {
		t.Fatalf("writing the older version's configuration as a cluster admin: %v", err)
	}
	if err := env.Extensions().Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
			return false, err
		}
		var got []string
		for _, w := range mwc.Webhooks {
			if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.TimeoutSeconds != 5 {
				return false, fmt.Errorf("webhook %s fails %s after %ds", w.Name, *w.FailurePolicy, *w.TimeoutSeconds)
			}
			got = append(got, w.Name)
		}
		return slices.Equal(got, want), fmt.Errorf("webhooks %v, want %v", got, want)
	}); err != nil {
		t.Fatalf("the older configuration was not replaced: %v", err)
	}
	waitUntilMutating(t, rendered.Agent)
}
