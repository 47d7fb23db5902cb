package health

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// tokenLifetime is the shortest a TokenRequest may ask for (kube-apiserver's minimum, 10 minutes).
const tokenLifetime = 10 * time.Minute

// serviceAccountTokens are short-lived tokens of one ServiceAccount, requested with the extension's own identity.
type serviceAccountTokens struct {
	client  corev1client.ServiceAccountsGetter
	account types.NamespacedName
}

// Token requests a new token; the caching source in front of it asks again once 80 % of its life has passed, as
// kubelet renews a projected token.
func (s serviceAccountTokens) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	issued := time.Now()
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(tokenLifetime.Seconds()))}}
	out, err := s.client.ServiceAccounts(s.account.Namespace).CreateToken(ctx, s.account.Name, request, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token of ServiceAccount %s for the probes: %w", s.account, err)
	}
	expiry := out.Status.ExpirationTimestamp.Time
	return &oauth2.Token{AccessToken: out.Status.Token, TokenType: "Bearer", Expiry: issued.Add(expiry.Sub(issued) * 4 / 5)}, nil
}

// proberConfig is config without the extension's credentials, authenticating with tokens of account instead: the
// probes go to every control-plane node's address, and what they carry should open nothing but /readyz (which
// kube-apiserver's default role system:public-info-viewer grants to every authenticated user).
func proberConfig(config *rest.Config, account types.NamespacedName) (*rest.Config, error) {
	client, err := corev1client.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(config)
	cfg.WrapTransport = transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(serviceAccountTokens{client: client, account: account}))
	return cfg, nil
}
