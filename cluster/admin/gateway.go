package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
)

// The gateway serves the admin methods that start a domain procedure
// without a handler of their own: a method whose rule in admin.proto says
// starts_procedure, that answers a SubmitProcedureResponse and that the
// domain builds (Domain.BuildMethods) is served by serveGateway, with the
// nonce read from the request field its rule's idempotency_key names, and
// forwarded to the leader by its method name. Adding such an operation
// then touches admin.proto and the domain's file for it, not this package.
//
// It replaces the methods' handlers in the service description that
// RegisterServices registers, rather than standing in the interceptor
// chain: gRPC runs a handler inside the chain the server was built with,
// so the gateway's sit exactly where the hand-written ones sat, after
// whatever interceptors (refusals, identity, access control and audit,
// request limits, submit rate limit) and in whatever order the program
// serving the API chose (Serve, the agent and clustertest each build
// their own). An interceptor would have to be placed last in each of those
// chains by hand, and a server built without it would answer UNIMPLEMENTED.

// gatewayMethod is a method the gateway serves.
type gatewayMethod struct {
	full    string                       // its full gRPC name
	request protoreflect.MessageType     // of its request
	nonce   protoreflect.FieldDescriptor // the request's nonce field; nil: none
}

// submitResponse is the answer a method the gateway serves must give.
var submitResponse = (&adminpb.SubmitProcedureResponse{}).ProtoReflect().Descriptor().FullName()

// adminService is admin.proto's Admin service, whose methods the gateway
// may serve.
var adminService = adminpb.File_admin_proto.Services().ByName("Admin")

// gatewayMethods are the methods of sd the gateway serves for a domain
// building procedures for methods (full gRPC names), keyed by full name.
// It refuses a method sd lacks, and one whose rule does not say it starts
// a procedure, that does not answer a SubmitProcedureResponse, or whose
// idempotency_key names no string field of its request: the server would
// serve it with the wrong limits, or without its nonce.
func gatewayMethods(sd protoreflect.ServiceDescriptor, methods []string) (map[string]gatewayMethod, error) {
	byName := map[string]protoreflect.MethodDescriptor{}
	ms := sd.Methods()
	for i := range ms.Len() {
		byName[optionspb.FullMethod(ms.Get(i))] = ms.Get(i)
	}
	out := map[string]gatewayMethod{}
	var errs []error
	for _, full := range methods {
		m, err := gatewayMethodOf(byName[full], full)
		if err != nil {
			errs = append(errs, fmt.Errorf("admin: the domain builds procedures for %s, %w", full, err))
			continue
		}
		out[full] = m
	}
	return out, errors.Join(errs...)
}

// gatewayMethodOf is what the gateway needs of md, the method full names
// (nil if the service lacks it), or why it cannot serve it.
func gatewayMethodOf(md protoreflect.MethodDescriptor, full string) (gatewayMethod, error) {
	if md == nil {
		return gatewayMethod{}, errors.New("a method the admin service lacks")
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return gatewayMethod{}, errors.New("a streaming method")
	}
	r, err := optionspb.RuleOf(md)
	if err != nil {
		return gatewayMethod{}, fmt.Errorf("whose rule is refused: %w", err)
	}
	if !r.GetStartsProcedure() {
		return gatewayMethod{}, errors.New("whose rule in admin.proto does not say starts_procedure (it would escape the submit rate limit)")
	}
	if out := md.Output().FullName(); out != submitResponse {
		return gatewayMethod{}, fmt.Errorf("which answers a %s, not a %s: give it a handler of its own", out, submitResponse)
	}
	m := gatewayMethod{full: full}
	if k := r.GetIdempotencyKey(); k != "" {
		f := md.Input().Fields().ByName(protoreflect.Name(k))
		if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
			return gatewayMethod{}, fmt.Errorf("whose idempotency_key %q names no string field of %s", k, md.Input().FullName())
		}
		m.nonce = f
	}
	if m.request, err = protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName()); err != nil {
		return gatewayMethod{}, fmt.Errorf("whose request %s has no Go type: %w", md.Input().FullName(), err)
	}
	return m, nil
}

// serviceDesc is the admin service's description with the gateway's
// handlers in place of the generated ones for the methods it serves: for
// an operation added since 0.1.0 the generated one would reach
// adminpb.UnimplementedAdminServer's method (0.1.0's eight keep methods of
// their own, gateway_compat.go).
func (s *Server) serviceDesc() *grpc.ServiceDesc {
	desc := adminpb.Admin_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	handlers := make(map[string]grpc.MethodHandler, len(desc.Methods))
	bulk := -1
	for i, md := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + md.MethodName
		if m, ok := s.gateway[full]; ok {
			desc.Methods[i].Handler = s.gatewayHandler(m)
		}
		if full == adminpb.Admin_ForwardReads_FullMethodName {
			bulk = i
		}
		handlers[full] = desc.Methods[i].Handler
	}
	if bulk >= 0 {
		desc.Methods[bulk].Handler = s.forwardReadsHandler(handlers)
	}
	return &desc
}

// gatewayHandler is the handler of m: what the generated one does for a
// hand-written method (decode, then the server's interceptors around the
// call), with serveGateway as the call.
func (s *Server) gatewayHandler(m gatewayMethod) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := m.request.New().Interface()
		if err := dec(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			return s.serveGateway(ctx, m, req.(proto.Message))
		}
		if interceptor == nil {
			return call(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: m.full}, call)
	}
}

// serveGateway serves a call of m: built here (a standby refuses bad
// input itself, without a trip to the leader), submitted on the leader
// with the request's nonce, or forwarded to it by name.
func (s *Server) serveGateway(ctx context.Context, m gatewayMethod, req proto.Message) (*adminpb.SubmitProcedureResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	var nonce string
	if m.nonce != nil {
		nonce = req.ProtoReflect().Get(m.nonce).String()
	}
	p, err := d.Build(m.full, req)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.SubmitProcedureResponse, error) {
		if err := d.CheckSubmissions(x, domainOwner, nonce); err != nil {
			return nil, err
		}
		id, err := x.Submit(p, procedure.SubmitOptions{Nonce: nonce, Owner: domainOwner, Submitter: submitterOf(ctx), Mutations: auditMutations(ctx)})
		if err != nil {
			return nil, err
		}
		return &adminpb.SubmitProcedureResponse{Id: id}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return forwardByName(ctx, c, m.full, req, new(adminpb.SubmitProcedureResponse))
	})
}

// forwardByName calls method of the leader's API with req, as its
// generated client method would, into out. c is the leaderAPI
// forwardCall passes every remote call.
func forwardByName[T proto.Message](ctx context.Context, c adminpb.AdminClient, method string, req proto.Message, out T) (T, error) {
	var zero T
	cc, ok := c.(grpc.ClientConnInterface)
	if !ok {
		return zero, fmt.Errorf("admin: forwarding %s: the leader's client %T has no connection to call by name", method, c)
	}
	if err := cc.Invoke(ctx, method, req, out, grpc.StaticMethod()); err != nil {
		return zero, err
	}
	return out, nil
}
