// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package helper decodes the exposure configuration from a providerConfig.
package helper

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure/install"
)

var decoder runtime.Decoder

func init() {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	// Strict: a misspelt field is an error rather than a silently ignored setting.
	decoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDecoder()
}

// ErrNoConfig is returned for an empty providerConfig.
var ErrNoConfig = errors.New("no providerConfig")

// Decode decodes, defaults and converts a providerConfig into the internal version. Unknown fields, a missing or
// unknown apiVersion/kind, and malformed values are errors.
func Decode(raw []byte) (*exposure.ExposureConfig, error) {
	if len(raw) == 0 {
		return nil, ErrNoConfig
	}
	cfg := &exposure.ExposureConfig{}
	if _, _, err := decoder.Decode(raw, nil, cfg); err != nil {
		return nil, fmt.Errorf("decoding providerConfig: %w", err)
	}
	return cfg, nil
}
