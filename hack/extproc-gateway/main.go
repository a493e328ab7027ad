// extproc-gateway: the data-plane half of an InferencePool-capable gateway, for the harness (no Envoy here).
//
// For each HTTP request it does what Envoy's ext_proc filter and an original-destination cluster do for an
// InferencePool backend (Gateway API Inference Extension, "endpoint picker protocol"): it streams the request's
// headers and body to the endpoint picker (envoy.service.ext_proc.v3.ExternalProcessor/Process, plain-text gRPC),
// reads the endpoint the picker chose from the x-gateway-destination-endpoint header mutation of its headers
// response, sends the request there, and returns the answer with x-gateway-destination-endpoint-served set to
// that endpoint. A picker that fails or names no endpoint gets a 503.
//
//	extproc-gateway --listen 127.0.0.1:PORT --epp 127.0.0.1:GRPC_PORT
//
// Built by hack/gateway-bins.sh inside the GIE module's tree (its go.mod pins go-control-plane and grpc).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const destinationHeader = "x-gateway-destination-endpoint"

func headerValue(h *configPb.HeaderValue) string {
	if len(h.RawValue) > 0 {
		return string(h.RawValue)
	}
	return h.Value
}

// pick streams the request to the picker and returns the endpoint (host:port) it chose.
func pick(ctx context.Context, client extProcPb.ExternalProcessorClient, r *http.Request, body []byte) (string, error) {
	stream, err := client.Process(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = stream.CloseSend() }()
	headers := []*configPb.HeaderValue{
		{Key: ":method", RawValue: []byte(r.Method)},
		{Key: ":path", RawValue: []byte(r.URL.RequestURI())},
		{Key: ":authority", RawValue: []byte(r.Host)},
		{Key: ":scheme", RawValue: []byte("http")},
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			headers = append(headers, &configPb.HeaderValue{Key: http.CanonicalHeaderKey(k), RawValue: []byte(v)})
		}
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: headers},
			EndOfStream: len(body) == 0}}}); err != nil {
		return "", err
	}
	if len(body) > 0 {
		if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
			RequestBody: &extProcPb.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
			return "", err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return "", err
		}
		hr, ok := resp.Response.(*extProcPb.ProcessingResponse_RequestHeaders)
		if !ok {
			continue
		}
		if common := hr.RequestHeaders.GetResponse(); common != nil && common.HeaderMutation != nil {
			for _, set := range common.HeaderMutation.SetHeaders {
				if set.Header != nil && set.Header.Key == destinationHeader {
					return headerValue(set.Header), nil
				}
			}
		}
		return "", fmt.Errorf("the picker's headers response names no %s", destinationHeader)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve HTTP on")
	epp := flag.String("epp", "127.0.0.1:9002", "the endpoint picker's ext_proc gRPC address (plain text)")
	flag.Parse()
	conn, err := grpc.NewClient(*epp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("endpoint picker %s: %v", *epp, err)
	}
	client := extProcPb.NewExternalProcessorClient(conn)
	upstream := &http.Client{Timeout: 60 * time.Second}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		endpoint, err := pick(ctx, client, r, body)
		if err != nil || endpoint == "" {
			log.Printf("%s %s: no endpoint: %v", r.Method, r.URL.Path, err)
			http.Error(w, fmt.Sprintf("no endpoint from the picker: %v", err), http.StatusServiceUnavailable)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+endpoint+r.URL.RequestURI(),
			bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := upstream.Do(out)
		if err != nil {
			log.Printf("%s %s -> %s: %v", r.Method, r.URL.Path, endpoint, err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.Header().Set(destinationHeader+"-served", endpoint)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		log.Printf("%s %s -> %s %d", r.Method, r.URL.Path, endpoint, resp.StatusCode)
	})
	log.Printf("extproc-gateway on %s, endpoint picker %s", *listen, *epp)
	log.Fatal(http.ListenAndServe(*listen, handler))
}
