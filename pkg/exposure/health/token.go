// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package health

import (
	"context"
	"fmt"
	"sync"
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

// serviceAccountTokens are short-lived tokens of one ServiceAccount, requested with the extension's own identity and
// renewed in the background once 60 % of a token's life has passed (kubelet renews a projected token at 80 %): a
// renewal, which may take as long as kube-apiserver does, never falls on a probe, whose timeout is half a second. A
// probe waits for a token only for the first one, or when kube-apiserver rejected the current one.
type serviceAccountTokens struct {
	client  corev1client.ServiceAccountsGetter
	account types.NamespacedName

	mu sync.Mutex
	// token is the current token, renewAt when the background renews it, issued when it was requested.
	token           *oauth2.Token
	issued, renewAt time.Time
}

var _ transport.ResettableTokenSource = &serviceAccountTokens{}

// Token returns the current token, requesting one when there is none.
func (s *serviceAccountTokens) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	token := s.token
	s.mu.Unlock()
	// Expiry is ours (90 % of the token's life), not oauth2's Valid, which counts a token as expired ten seconds early.
	if token != nil && time.Now().Before(token.Expiry) {
		return token, nil
	}
	return s.renew(context.Background())
}

// ResetTokenOlderThan drops the current token when it was issued before t: kube-apiserver rejected it.
func (s *serviceAccountTokens) ResetTokenOlderThan(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.issued.Before(t) {
		s.token = nil
	}
}

// renew requests a token and makes it the current one.
func (s *serviceAccountTokens) renew(ctx context.Context) (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	issued := time.Now()
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(tokenLifetime.Seconds()))}}
	out, err := s.client.ServiceAccounts(s.account.Namespace).CreateToken(ctx, s.account.Name, request, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token of ServiceAccount %s for the probes: %w", s.account, err)
	}
	// The expiry as this process's clock sees it: the lifetime kube-apiserver granted, never more than asked for, so
	// that a skewed clock between the two neither keeps an expired token nor renews on every probe.
	life := min(max(out.Status.ExpirationTimestamp.Sub(issued), 0), tokenLifetime)
	if life <= 0 {
		life = tokenLifetime
	}
	token := &oauth2.Token{AccessToken: out.Status.Token, TokenType: "Bearer", Expiry: issued.Add(life * 9 / 10)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token, s.issued, s.renewAt = token, issued, issued.Add(life*3/5)
	return token, nil
}

// renewInBackground renews the token once 60 % of its life has passed, until ctx ends; a failed renewal is tried
// again after a second, while the current token stays valid.
func (s *serviceAccountTokens) renewInBackground(ctx context.Context) {
	for {
		s.mu.Lock()
		wait := time.Until(s.renewAt)
		if s.token == nil {
			wait = time.Second
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		s.mu.Lock()
		due := s.token != nil && !time.Now().Before(s.renewAt)
		s.mu.Unlock()
		if due {
			if _, err := s.renew(ctx); err != nil {
				s.mu.Lock()
				s.renewAt = time.Now().Add(time.Second)
				s.mu.Unlock()
			}
		}
	}
}

// proberConfig is config without the extension's credentials, authenticating with tokens of account instead: the
// probes go to every control-plane node's address, and what they carry should open nothing but /readyz (which
// kube-apiserver's default role system:public-info-viewer grants to every authenticated user).
func proberConfig(config *rest.Config, account types.NamespacedName) (*rest.Config, *serviceAccountTokens, error) {
	client, err := corev1client.NewForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	tokens := &serviceAccountTokens{client: client, account: account}
	cfg := rest.AnonymousClientConfig(config)
	cfg.WrapTransport = transport.ResettableTokenSourceWrapTransport(tokens)
	return cfg, tokens, nil
}
